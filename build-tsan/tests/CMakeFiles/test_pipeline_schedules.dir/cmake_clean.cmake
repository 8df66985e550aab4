file(REMOVE_RECURSE
  "CMakeFiles/test_pipeline_schedules.dir/test_pipeline_schedules.cpp.o"
  "CMakeFiles/test_pipeline_schedules.dir/test_pipeline_schedules.cpp.o.d"
  "test_pipeline_schedules"
  "test_pipeline_schedules.pdb"
  "test_pipeline_schedules_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_pipeline_schedules.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
