# Empty compiler generated dependencies file for test_tensor_gemm.
# This may be replaced when dependencies are built.
