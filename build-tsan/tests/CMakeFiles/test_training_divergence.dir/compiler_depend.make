# Empty compiler generated dependencies file for test_training_divergence.
# This may be replaced when dependencies are built.
