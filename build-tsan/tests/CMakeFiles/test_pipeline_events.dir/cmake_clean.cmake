file(REMOVE_RECURSE
  "CMakeFiles/test_pipeline_events.dir/test_pipeline_events.cpp.o"
  "CMakeFiles/test_pipeline_events.dir/test_pipeline_events.cpp.o.d"
  "test_pipeline_events"
  "test_pipeline_events.pdb"
  "test_pipeline_events_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_pipeline_events.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
