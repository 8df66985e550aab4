file(REMOVE_RECURSE
  "CMakeFiles/test_data_synthetic.dir/test_data_synthetic.cpp.o"
  "CMakeFiles/test_data_synthetic.dir/test_data_synthetic.cpp.o.d"
  "test_data_synthetic"
  "test_data_synthetic.pdb"
  "test_data_synthetic_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_data_synthetic.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
