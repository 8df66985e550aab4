# Empty compiler generated dependencies file for test_tensor_dtype.
# This may be replaced when dependencies are built.
