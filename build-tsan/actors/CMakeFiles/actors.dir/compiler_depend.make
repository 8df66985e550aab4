# Empty compiler generated dependencies file for actors.
# This may be replaced when dependencies are built.
