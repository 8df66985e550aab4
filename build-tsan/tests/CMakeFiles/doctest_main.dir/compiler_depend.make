# Empty compiler generated dependencies file for doctest_main.
# This may be replaced when dependencies are built.
