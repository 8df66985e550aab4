file(REMOVE_RECURSE
  "CMakeFiles/test_schedule_text.dir/test_schedule_text.cpp.o"
  "CMakeFiles/test_schedule_text.dir/test_schedule_text.cpp.o.d"
  "test_schedule_text"
  "test_schedule_text.pdb"
  "test_schedule_text_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_schedule_text.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
