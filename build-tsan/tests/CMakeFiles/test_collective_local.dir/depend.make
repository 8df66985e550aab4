# Empty dependencies file for test_collective_local.
# This may be replaced when dependencies are built.
