file(REMOVE_RECURSE
  "CMakeFiles/test_tensor_dtype.dir/test_tensor_dtype.cpp.o"
  "CMakeFiles/test_tensor_dtype.dir/test_tensor_dtype.cpp.o.d"
  "test_tensor_dtype"
  "test_tensor_dtype.pdb"
  "test_tensor_dtype_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_tensor_dtype.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
