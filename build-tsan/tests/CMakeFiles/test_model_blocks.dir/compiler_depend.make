# Empty compiler generated dependencies file for test_model_blocks.
# This may be replaced when dependencies are built.
