# Empty compiler generated dependencies file for example_distributed_pipeline.
# This may be replaced when dependencies are built.
