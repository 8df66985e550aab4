# Empty dependencies file for test_wire_format.
# This may be replaced when dependencies are built.
