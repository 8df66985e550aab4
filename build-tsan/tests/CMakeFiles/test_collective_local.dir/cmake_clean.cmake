file(REMOVE_RECURSE
  "CMakeFiles/test_collective_local.dir/test_collective_local.cpp.o"
  "CMakeFiles/test_collective_local.dir/test_collective_local.cpp.o.d"
  "test_collective_local"
  "test_collective_local.pdb"
  "test_collective_local_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_collective_local.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
