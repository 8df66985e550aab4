# Empty compiler generated dependencies file for test_model_loss.
# This may be replaced when dependencies are built.
