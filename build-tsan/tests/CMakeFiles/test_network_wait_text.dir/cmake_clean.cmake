file(REMOVE_RECURSE
  "CMakeFiles/test_network_wait_text.dir/test_network_wait_text.cpp.o"
  "CMakeFiles/test_network_wait_text.dir/test_network_wait_text.cpp.o.d"
  "test_network_wait_text"
  "test_network_wait_text.pdb"
  "test_network_wait_text_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_network_wait_text.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
