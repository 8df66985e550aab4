# Empty compiler generated dependencies file for actorpipe.
# This may be replaced when dependencies are built.
