# Empty compiler generated dependencies file for test_schedule_model.
# This may be replaced when dependencies are built.
