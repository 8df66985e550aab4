file(REMOVE_RECURSE
  "CMakeFiles/test_wire_format.dir/test_wire_format.cpp.o"
  "CMakeFiles/test_wire_format.dir/test_wire_format.cpp.o.d"
  "test_wire_format"
  "test_wire_format.pdb"
  "test_wire_format_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_wire_format.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
