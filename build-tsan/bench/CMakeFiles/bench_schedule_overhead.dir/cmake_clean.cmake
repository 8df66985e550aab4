file(REMOVE_RECURSE
  "CMakeFiles/bench_schedule_overhead.dir/bench_schedule_overhead.cpp.o"
  "CMakeFiles/bench_schedule_overhead.dir/bench_schedule_overhead.cpp.o.d"
  "bench_schedule_overhead"
  "bench_schedule_overhead.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/bench_schedule_overhead.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
