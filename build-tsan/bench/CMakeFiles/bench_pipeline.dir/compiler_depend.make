# Empty compiler generated dependencies file for bench_pipeline.
# This may be replaced when dependencies are built.
