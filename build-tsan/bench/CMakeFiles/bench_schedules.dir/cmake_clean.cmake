file(REMOVE_RECURSE
  "CMakeFiles/bench_schedules.dir/bench_schedules.cpp.o"
  "CMakeFiles/bench_schedules.dir/bench_schedules.cpp.o.d"
  "bench_schedules"
  "bench_schedules.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/bench_schedules.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
