# Empty dependencies file for bench_gemm.
# This may be replaced when dependencies are built.
