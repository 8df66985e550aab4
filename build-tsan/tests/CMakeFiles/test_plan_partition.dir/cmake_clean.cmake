file(REMOVE_RECURSE
  "CMakeFiles/test_plan_partition.dir/test_plan_partition.cpp.o"
  "CMakeFiles/test_plan_partition.dir/test_plan_partition.cpp.o.d"
  "test_plan_partition"
  "test_plan_partition.pdb"
  "test_plan_partition_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_plan_partition.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
