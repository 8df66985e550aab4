# Empty dependencies file for test_checkpoint_named_tensors.
# This may be replaced when dependencies are built.
