# Empty compiler generated dependencies file for model.
# This may be replaced when dependencies are built.
