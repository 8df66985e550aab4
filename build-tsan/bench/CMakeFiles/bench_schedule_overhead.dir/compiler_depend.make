# Empty compiler generated dependencies file for bench_schedule_overhead.
# This may be replaced when dependencies are built.
