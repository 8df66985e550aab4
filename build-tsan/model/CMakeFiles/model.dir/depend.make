# Empty dependencies file for model.
# This may be replaced when dependencies are built.
