# Empty compiler generated dependencies file for test_data_synthetic.
# This may be replaced when dependencies are built.
