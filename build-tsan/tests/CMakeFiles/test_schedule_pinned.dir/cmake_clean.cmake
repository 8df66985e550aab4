file(REMOVE_RECURSE
  "CMakeFiles/test_schedule_pinned.dir/test_schedule_pinned.cpp.o"
  "CMakeFiles/test_schedule_pinned.dir/test_schedule_pinned.cpp.o.d"
  "test_schedule_pinned"
  "test_schedule_pinned.pdb"
  "test_schedule_pinned_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_schedule_pinned.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
