file(REMOVE_RECURSE
  "CMakeFiles/test_checkpoint_named_tensors.dir/test_checkpoint_named_tensors.cpp.o"
  "CMakeFiles/test_checkpoint_named_tensors.dir/test_checkpoint_named_tensors.cpp.o.d"
  "test_checkpoint_named_tensors"
  "test_checkpoint_named_tensors.pdb"
  "test_checkpoint_named_tensors_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_checkpoint_named_tensors.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
