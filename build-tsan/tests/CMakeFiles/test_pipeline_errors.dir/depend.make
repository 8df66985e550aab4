# Empty dependencies file for test_pipeline_errors.
# This may be replaced when dependencies are built.
