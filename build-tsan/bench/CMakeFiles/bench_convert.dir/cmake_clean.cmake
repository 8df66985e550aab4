file(REMOVE_RECURSE
  "CMakeFiles/bench_convert.dir/bench_convert.cpp.o"
  "CMakeFiles/bench_convert.dir/bench_convert.cpp.o.d"
  "bench_convert"
  "bench_convert.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/bench_convert.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
