# Empty compiler generated dependencies file for test_random_pinned.
# This may be replaced when dependencies are built.
