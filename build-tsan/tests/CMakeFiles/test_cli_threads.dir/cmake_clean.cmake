file(REMOVE_RECURSE
  "CMakeFiles/test_cli_threads.dir/test_cli_threads.cpp.o"
  "CMakeFiles/test_cli_threads.dir/test_cli_threads.cpp.o.d"
  "test_cli_threads"
  "test_cli_threads.pdb"
  "test_cli_threads_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_cli_threads.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
