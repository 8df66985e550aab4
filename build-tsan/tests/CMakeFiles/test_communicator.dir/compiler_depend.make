# Empty compiler generated dependencies file for test_communicator.
# This may be replaced when dependencies are built.
