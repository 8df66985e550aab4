# Empty compiler generated dependencies file for test_schedule_text.
# This may be replaced when dependencies are built.
