file(REMOVE_RECURSE
  "CMakeFiles/test_model_blocks.dir/test_model_blocks.cpp.o"
  "CMakeFiles/test_model_blocks.dir/test_model_blocks.cpp.o.d"
  "test_model_blocks"
  "test_model_blocks.pdb"
  "test_model_blocks_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_model_blocks.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
