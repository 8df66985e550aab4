file(REMOVE_RECURSE
  "CMakeFiles/test_random_pinned.dir/test_random_pinned.cpp.o"
  "CMakeFiles/test_random_pinned.dir/test_random_pinned.cpp.o.d"
  "test_random_pinned"
  "test_random_pinned.pdb"
  "test_random_pinned_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_random_pinned.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
