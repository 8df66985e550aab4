# Empty dependencies file for collective.
# This may be replaced when dependencies are built.
