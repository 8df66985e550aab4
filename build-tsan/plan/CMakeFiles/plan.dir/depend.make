# Empty dependencies file for plan.
# This may be replaced when dependencies are built.
