# Empty compiler generated dependencies file for test_network_wait_text.
# This may be replaced when dependencies are built.
