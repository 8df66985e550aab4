# Empty compiler generated dependencies file for bench_soak.
# This may be replaced when dependencies are built.
