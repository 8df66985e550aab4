# Empty dependencies file for test_model_sequential.
# This may be replaced when dependencies are built.
