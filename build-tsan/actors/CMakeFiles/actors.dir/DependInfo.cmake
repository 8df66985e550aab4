
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/wt-coll/actors/actor_communicator.cpp" "actors/CMakeFiles/actors.dir/actor_communicator.cpp.o" "gcc" "actors/CMakeFiles/actors.dir/actor_communicator.cpp.o.d"
  "/work/wt-coll/actors/coordinator.cpp" "actors/CMakeFiles/actors.dir/coordinator.cpp.o" "gcc" "actors/CMakeFiles/actors.dir/coordinator.cpp.o.d"
  "/work/wt-coll/actors/node.cpp" "actors/CMakeFiles/actors.dir/node.cpp.o" "gcc" "actors/CMakeFiles/actors.dir/node.cpp.o.d"
  "/work/wt-coll/actors/pipeline.cpp" "actors/CMakeFiles/actors.dir/pipeline.cpp.o" "gcc" "actors/CMakeFiles/actors.dir/pipeline.cpp.o.d"
  "/work/wt-coll/actors/processor.cpp" "actors/CMakeFiles/actors.dir/processor.cpp.o" "gcc" "actors/CMakeFiles/actors.dir/processor.cpp.o.d"
  "/work/wt-coll/actors/retriever.cpp" "actors/CMakeFiles/actors.dir/retriever.cpp.o" "gcc" "actors/CMakeFiles/actors.dir/retriever.cpp.o.d"
  "/work/wt-coll/actors/run_node.cpp" "actors/CMakeFiles/actors.dir/run_node.cpp.o" "gcc" "actors/CMakeFiles/actors.dir/run_node.cpp.o.d"
  "/work/wt-coll/actors/sender.cpp" "actors/CMakeFiles/actors.dir/sender.cpp.o" "gcc" "actors/CMakeFiles/actors.dir/sender.cpp.o.d"
  "/work/wt-coll/actors/stage_spawner.cpp" "actors/CMakeFiles/actors.dir/stage_spawner.cpp.o" "gcc" "actors/CMakeFiles/actors.dir/stage_spawner.cpp.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  "/work/wt-coll/build-tsan/network/CMakeFiles/network.dir/DependInfo.cmake"
  "/work/wt-coll/build-tsan/stage/CMakeFiles/stage.dir/DependInfo.cmake"
  "/work/wt-coll/build-tsan/plan/CMakeFiles/plan.dir/DependInfo.cmake"
  "/work/wt-coll/build-tsan/model/CMakeFiles/model.dir/DependInfo.cmake"
  "/work/wt-coll/build-tsan/schedule/CMakeFiles/schedule.dir/DependInfo.cmake"
  "/work/wt-coll/build-tsan/checkpoint/CMakeFiles/checkpoint.dir/DependInfo.cmake"
  "/work/wt-coll/build-tsan/training/CMakeFiles/training.dir/DependInfo.cmake"
  "/work/wt-coll/build-tsan/data/CMakeFiles/data.dir/DependInfo.cmake"
  "/work/wt-coll/build-tsan/tensor/CMakeFiles/tensor.dir/DependInfo.cmake"
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
