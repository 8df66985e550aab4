# Empty compiler generated dependencies file for example_custom_layer.
# This may be replaced when dependencies are built.
