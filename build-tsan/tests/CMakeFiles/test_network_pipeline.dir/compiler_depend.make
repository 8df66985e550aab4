# Empty compiler generated dependencies file for test_network_pipeline.
# This may be replaced when dependencies are built.
