file(REMOVE_RECURSE
  "CMakeFiles/test_tensor_nn_ops.dir/test_tensor_nn_ops.cpp.o"
  "CMakeFiles/test_tensor_nn_ops.dir/test_tensor_nn_ops.cpp.o.d"
  "test_tensor_nn_ops"
  "test_tensor_nn_ops.pdb"
  "test_tensor_nn_ops_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_tensor_nn_ops.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
