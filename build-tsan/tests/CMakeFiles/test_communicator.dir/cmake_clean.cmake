file(REMOVE_RECURSE
  "CMakeFiles/test_communicator.dir/test_communicator.cpp.o"
  "CMakeFiles/test_communicator.dir/test_communicator.cpp.o.d"
  "test_communicator"
  "test_communicator.pdb"
  "test_communicator_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_communicator.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
