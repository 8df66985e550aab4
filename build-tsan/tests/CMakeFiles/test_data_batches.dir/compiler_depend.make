# Empty compiler generated dependencies file for test_data_batches.
# This may be replaced when dependencies are built.
