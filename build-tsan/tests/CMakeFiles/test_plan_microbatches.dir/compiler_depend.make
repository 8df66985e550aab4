# Empty compiler generated dependencies file for test_plan_microbatches.
# This may be replaced when dependencies are built.
