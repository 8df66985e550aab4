file(REMOVE_RECURSE
  "CMakeFiles/bench_single_process.dir/bench_single_process.cpp.o"
  "CMakeFiles/bench_single_process.dir/bench_single_process.cpp.o.d"
  "bench_single_process"
  "bench_single_process.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/bench_single_process.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
