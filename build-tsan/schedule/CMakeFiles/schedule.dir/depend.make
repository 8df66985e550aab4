# Empty dependencies file for schedule.
# This may be replaced when dependencies are built.
