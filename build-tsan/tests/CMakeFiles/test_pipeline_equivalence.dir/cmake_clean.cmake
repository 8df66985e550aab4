file(REMOVE_RECURSE
  "CMakeFiles/test_pipeline_equivalence.dir/test_pipeline_equivalence.cpp.o"
  "CMakeFiles/test_pipeline_equivalence.dir/test_pipeline_equivalence.cpp.o.d"
  "test_pipeline_equivalence"
  "test_pipeline_equivalence.pdb"
  "test_pipeline_equivalence_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_pipeline_equivalence.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
