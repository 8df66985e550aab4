file(REMOVE_RECURSE
  "CMakeFiles/example_local_pipeline.dir/local_pipeline.cpp.o"
  "CMakeFiles/example_local_pipeline.dir/local_pipeline.cpp.o.d"
  "example_local_pipeline"
  "example_local_pipeline.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/example_local_pipeline.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
