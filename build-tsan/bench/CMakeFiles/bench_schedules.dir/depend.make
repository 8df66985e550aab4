# Empty dependencies file for bench_schedules.
# This may be replaced when dependencies are built.
