
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/wt-coll/network/handshake.cpp" "network/CMakeFiles/network.dir/handshake.cpp.o" "gcc" "network/CMakeFiles/network.dir/handshake.cpp.o.d"
  "/work/wt-coll/network/message_types.cpp" "network/CMakeFiles/network.dir/message_types.cpp.o" "gcc" "network/CMakeFiles/network.dir/message_types.cpp.o.d"
  "/work/wt-coll/network/port_probe.cpp" "network/CMakeFiles/network.dir/port_probe.cpp.o" "gcc" "network/CMakeFiles/network.dir/port_probe.cpp.o.d"
  "/work/wt-coll/network/wire_format.cpp" "network/CMakeFiles/network.dir/wire_format.cpp.o" "gcc" "network/CMakeFiles/network.dir/wire_format.cpp.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  "/work/wt-coll/build-tsan/stage/CMakeFiles/stage.dir/DependInfo.cmake"
  "/work/wt-coll/build-tsan/checkpoint/CMakeFiles/checkpoint.dir/DependInfo.cmake"
  "/work/wt-coll/build-tsan/schedule/CMakeFiles/schedule.dir/DependInfo.cmake"
  "/work/wt-coll/build-tsan/model/CMakeFiles/model.dir/DependInfo.cmake"
  "/work/wt-coll/build-tsan/tensor/CMakeFiles/tensor.dir/DependInfo.cmake"
  "/work/wt-coll/build-tsan/plan/CMakeFiles/plan.dir/DependInfo.cmake"
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
