# Empty dependencies file for test_schedule_pinned.
# This may be replaced when dependencies are built.
