# Empty compiler generated dependencies file for test_cli_threads.
# This may be replaced when dependencies are built.
