# Empty compiler generated dependencies file for network.
# This may be replaced when dependencies are built.
