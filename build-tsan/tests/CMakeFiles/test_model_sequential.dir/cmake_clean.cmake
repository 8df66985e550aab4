file(REMOVE_RECURSE
  "CMakeFiles/test_model_sequential.dir/test_model_sequential.cpp.o"
  "CMakeFiles/test_model_sequential.dir/test_model_sequential.cpp.o.d"
  "test_model_sequential"
  "test_model_sequential.pdb"
  "test_model_sequential_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_model_sequential.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
