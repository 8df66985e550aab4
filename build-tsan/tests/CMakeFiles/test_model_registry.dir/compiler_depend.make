# Empty compiler generated dependencies file for test_model_registry.
# This may be replaced when dependencies are built.
