# Empty compiler generated dependencies file for test_pipeline_equivalence.
# This may be replaced when dependencies are built.
