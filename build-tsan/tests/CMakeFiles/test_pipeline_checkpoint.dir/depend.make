# Empty dependencies file for test_pipeline_checkpoint.
# This may be replaced when dependencies are built.
