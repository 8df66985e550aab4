# Empty dependencies file for test_pipeline_events.
# This may be replaced when dependencies are built.
