file(REMOVE_RECURSE
  "CMakeFiles/plan.dir/microbatches.cpp.o"
  "CMakeFiles/plan.dir/microbatches.cpp.o.d"
  "CMakeFiles/plan.dir/partition.cpp.o"
  "CMakeFiles/plan.dir/partition.cpp.o.d"
  "CMakeFiles/plan.dir/stage_info.cpp.o"
  "CMakeFiles/plan.dir/stage_info.cpp.o.d"
  "libplan.a"
  "libplan.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/plan.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
