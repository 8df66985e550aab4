# Empty dependencies file for test_pipeline_schedules.
# This may be replaced when dependencies are built.
