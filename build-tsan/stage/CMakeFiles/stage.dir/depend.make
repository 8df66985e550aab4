# Empty dependencies file for stage.
# This may be replaced when dependencies are built.
