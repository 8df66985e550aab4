file(REMOVE_RECURSE
  "CMakeFiles/stage.dir/event_log.cpp.o"
  "CMakeFiles/stage.dir/event_log.cpp.o.d"
  "CMakeFiles/stage.dir/stage_worker.cpp.o"
  "CMakeFiles/stage.dir/stage_worker.cpp.o.d"
  "CMakeFiles/stage.dir/task_queue.cpp.o"
  "CMakeFiles/stage.dir/task_queue.cpp.o.d"
  "libstage.a"
  "libstage.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/stage.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
