# Empty dependencies file for test_schedule_validate.
# This may be replaced when dependencies are built.
