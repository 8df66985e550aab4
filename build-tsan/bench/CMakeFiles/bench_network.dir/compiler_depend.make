# Empty compiler generated dependencies file for bench_network.
# This may be replaced when dependencies are built.
