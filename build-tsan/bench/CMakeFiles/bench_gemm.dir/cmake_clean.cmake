file(REMOVE_RECURSE
  "CMakeFiles/bench_gemm.dir/bench_gemm.cpp.o"
  "CMakeFiles/bench_gemm.dir/bench_gemm.cpp.o.d"
  "bench_gemm"
  "bench_gemm.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/bench_gemm.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
