file(REMOVE_RECURSE
  "CMakeFiles/test_network_pipeline.dir/test_network_pipeline.cpp.o"
  "CMakeFiles/test_network_pipeline.dir/test_network_pipeline.cpp.o.d"
  "test_network_pipeline"
  "test_network_pipeline.pdb"
  "test_network_pipeline_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_network_pipeline.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
