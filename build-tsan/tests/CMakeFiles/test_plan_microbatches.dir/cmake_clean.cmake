file(REMOVE_RECURSE
  "CMakeFiles/test_plan_microbatches.dir/test_plan_microbatches.cpp.o"
  "CMakeFiles/test_plan_microbatches.dir/test_plan_microbatches.cpp.o.d"
  "test_plan_microbatches"
  "test_plan_microbatches.pdb"
  "test_plan_microbatches_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_plan_microbatches.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
