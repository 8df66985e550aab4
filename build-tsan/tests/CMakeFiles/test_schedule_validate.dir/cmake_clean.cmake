file(REMOVE_RECURSE
  "CMakeFiles/test_schedule_validate.dir/test_schedule_validate.cpp.o"
  "CMakeFiles/test_schedule_validate.dir/test_schedule_validate.cpp.o.d"
  "test_schedule_validate"
  "test_schedule_validate.pdb"
  "test_schedule_validate_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_schedule_validate.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
