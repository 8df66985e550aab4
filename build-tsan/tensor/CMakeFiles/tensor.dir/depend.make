# Empty dependencies file for tensor.
# This may be replaced when dependencies are built.
