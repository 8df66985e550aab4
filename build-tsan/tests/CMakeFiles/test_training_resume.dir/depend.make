# Empty dependencies file for test_training_resume.
# This may be replaced when dependencies are built.
