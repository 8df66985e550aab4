file(REMOVE_RECURSE
  "CMakeFiles/test_checkpoint_safetensors.dir/test_checkpoint_safetensors.cpp.o"
  "CMakeFiles/test_checkpoint_safetensors.dir/test_checkpoint_safetensors.cpp.o.d"
  "test_checkpoint_safetensors"
  "test_checkpoint_safetensors.pdb"
  "test_checkpoint_safetensors_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_checkpoint_safetensors.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
