# Empty dependencies file for example_local_pipeline.
# This may be replaced when dependencies are built.
