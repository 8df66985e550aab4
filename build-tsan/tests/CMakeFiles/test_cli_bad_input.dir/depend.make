# Empty dependencies file for test_cli_bad_input.
# This may be replaced when dependencies are built.
