# Empty compiler generated dependencies file for test_stage_state.
# This may be replaced when dependencies are built.
