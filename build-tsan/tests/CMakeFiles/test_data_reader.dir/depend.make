# Empty dependencies file for test_data_reader.
# This may be replaced when dependencies are built.
