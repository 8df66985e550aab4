# CMake generated Testfile for 
# Source directory: /work/wt-coll
# Build directory: /work/wt-coll/build-tsan
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
subdirs("random")
subdirs("tensor")
subdirs("collective")
subdirs("model")
subdirs("checkpoint")
subdirs("data")
subdirs("schedule")
subdirs("training")
subdirs("plan")
subdirs("stage")
subdirs("network")
subdirs("actors")
subdirs("cli")
subdirs("bench")
subdirs("examples")
subdirs("tests")
