# Empty compiler generated dependencies file for bench_single_process.
# This may be replaced when dependencies are built.
