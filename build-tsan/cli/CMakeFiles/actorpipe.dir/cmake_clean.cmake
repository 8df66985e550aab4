file(REMOVE_RECURSE
  "CMakeFiles/actorpipe.dir/checks.cpp.o"
  "CMakeFiles/actorpipe.dir/checks.cpp.o.d"
  "CMakeFiles/actorpipe.dir/main.cpp.o"
  "CMakeFiles/actorpipe.dir/main.cpp.o.d"
  "CMakeFiles/actorpipe.dir/node_command.cpp.o"
  "CMakeFiles/actorpipe.dir/node_command.cpp.o.d"
  "CMakeFiles/actorpipe.dir/schedule_command.cpp.o"
  "CMakeFiles/actorpipe.dir/schedule_command.cpp.o.d"
  "CMakeFiles/actorpipe.dir/train_command.cpp.o"
  "CMakeFiles/actorpipe.dir/train_command.cpp.o.d"
  "actorpipe"
  "actorpipe.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/actorpipe.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
