file(REMOVE_RECURSE
  "CMakeFiles/test_data_batches.dir/test_data_batches.cpp.o"
  "CMakeFiles/test_data_batches.dir/test_data_batches.cpp.o.d"
  "test_data_batches"
  "test_data_batches.pdb"
  "test_data_batches_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_data_batches.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
