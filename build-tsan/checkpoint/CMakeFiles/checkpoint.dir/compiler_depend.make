# Empty compiler generated dependencies file for checkpoint.
# This may be replaced when dependencies are built.
