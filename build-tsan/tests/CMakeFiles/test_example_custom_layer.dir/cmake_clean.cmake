file(REMOVE_RECURSE
  "CMakeFiles/test_example_custom_layer.dir/test_example_custom_layer.cpp.o"
  "CMakeFiles/test_example_custom_layer.dir/test_example_custom_layer.cpp.o.d"
  "test_example_custom_layer"
  "test_example_custom_layer.pdb"
  "test_example_custom_layer_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_example_custom_layer.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
