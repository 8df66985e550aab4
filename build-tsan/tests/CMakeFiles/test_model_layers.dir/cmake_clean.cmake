file(REMOVE_RECURSE
  "CMakeFiles/test_model_layers.dir/test_model_layers.cpp.o"
  "CMakeFiles/test_model_layers.dir/test_model_layers.cpp.o.d"
  "test_model_layers"
  "test_model_layers.pdb"
  "test_model_layers_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_model_layers.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
