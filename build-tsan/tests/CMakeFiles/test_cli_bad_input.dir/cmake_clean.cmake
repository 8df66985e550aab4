file(REMOVE_RECURSE
  "CMakeFiles/test_cli_bad_input.dir/test_cli_bad_input.cpp.o"
  "CMakeFiles/test_cli_bad_input.dir/test_cli_bad_input.cpp.o.d"
  "test_cli_bad_input"
  "test_cli_bad_input.pdb"
  "test_cli_bad_input_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_cli_bad_input.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
