file(REMOVE_RECURSE
  "CMakeFiles/test_data_reader.dir/test_data_reader.cpp.o"
  "CMakeFiles/test_data_reader.dir/test_data_reader.cpp.o.d"
  "test_data_reader"
  "test_data_reader.pdb"
  "test_data_reader_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_data_reader.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
