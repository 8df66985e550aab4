# Empty dependencies file for test_model_optimizer.
# This may be replaced when dependencies are built.
