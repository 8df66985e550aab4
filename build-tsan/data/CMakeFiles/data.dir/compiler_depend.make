# Empty compiler generated dependencies file for data.
# This may be replaced when dependencies are built.
