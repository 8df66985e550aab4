# Empty compiler generated dependencies file for test_plan_partition.
# This may be replaced when dependencies are built.
