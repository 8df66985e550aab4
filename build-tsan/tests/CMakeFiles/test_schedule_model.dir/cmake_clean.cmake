file(REMOVE_RECURSE
  "CMakeFiles/test_schedule_model.dir/test_schedule_model.cpp.o"
  "CMakeFiles/test_schedule_model.dir/test_schedule_model.cpp.o.d"
  "test_schedule_model"
  "test_schedule_model.pdb"
  "test_schedule_model_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_schedule_model.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
