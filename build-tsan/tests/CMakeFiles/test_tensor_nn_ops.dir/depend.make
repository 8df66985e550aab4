# Empty dependencies file for test_tensor_nn_ops.
# This may be replaced when dependencies are built.
