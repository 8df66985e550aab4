file(REMOVE_RECURSE
  "CMakeFiles/test_tensor_gemm.dir/test_tensor_gemm.cpp.o"
  "CMakeFiles/test_tensor_gemm.dir/test_tensor_gemm.cpp.o.d"
  "test_tensor_gemm"
  "test_tensor_gemm.pdb"
  "test_tensor_gemm_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_tensor_gemm.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
