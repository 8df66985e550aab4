file(REMOVE_RECURSE
  "CMakeFiles/test_pipeline_errors.dir/test_pipeline_errors.cpp.o"
  "CMakeFiles/test_pipeline_errors.dir/test_pipeline_errors.cpp.o.d"
  "test_pipeline_errors"
  "test_pipeline_errors.pdb"
  "test_pipeline_errors_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_pipeline_errors.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
