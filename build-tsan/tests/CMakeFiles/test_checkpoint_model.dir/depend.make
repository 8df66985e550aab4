# Empty dependencies file for test_checkpoint_model.
# This may be replaced when dependencies are built.
