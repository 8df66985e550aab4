# Empty compiler generated dependencies file for training.
# This may be replaced when dependencies are built.
