file(REMOVE_RECURSE
  "CMakeFiles/example_custom_layer.dir/custom_layer.cpp.o"
  "CMakeFiles/example_custom_layer.dir/custom_layer.cpp.o.d"
  "example_custom_layer"
  "example_custom_layer.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/example_custom_layer.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
