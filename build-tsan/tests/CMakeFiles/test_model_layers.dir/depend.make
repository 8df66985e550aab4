# Empty dependencies file for test_model_layers.
# This may be replaced when dependencies are built.
