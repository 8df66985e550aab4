file(REMOVE_RECURSE
  "CMakeFiles/actors.dir/actor_communicator.cpp.o"
  "CMakeFiles/actors.dir/actor_communicator.cpp.o.d"
  "CMakeFiles/actors.dir/coordinator.cpp.o"
  "CMakeFiles/actors.dir/coordinator.cpp.o.d"
  "CMakeFiles/actors.dir/node.cpp.o"
  "CMakeFiles/actors.dir/node.cpp.o.d"
  "CMakeFiles/actors.dir/pipeline.cpp.o"
  "CMakeFiles/actors.dir/pipeline.cpp.o.d"
  "CMakeFiles/actors.dir/processor.cpp.o"
  "CMakeFiles/actors.dir/processor.cpp.o.d"
  "CMakeFiles/actors.dir/retriever.cpp.o"
  "CMakeFiles/actors.dir/retriever.cpp.o.d"
  "CMakeFiles/actors.dir/run_node.cpp.o"
  "CMakeFiles/actors.dir/run_node.cpp.o.d"
  "CMakeFiles/actors.dir/sender.cpp.o"
  "CMakeFiles/actors.dir/sender.cpp.o.d"
  "CMakeFiles/actors.dir/stage_spawner.cpp.o"
  "CMakeFiles/actors.dir/stage_spawner.cpp.o.d"
  "libactors.a"
  "libactors.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/actors.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
