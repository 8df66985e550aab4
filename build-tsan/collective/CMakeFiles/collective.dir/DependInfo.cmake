
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/wt-coll/collective/local_group.cpp" "collective/CMakeFiles/collective.dir/local_group.cpp.o" "gcc" "collective/CMakeFiles/collective.dir/local_group.cpp.o.d"
  "/work/wt-coll/collective/shard.cpp" "collective/CMakeFiles/collective.dir/shard.cpp.o" "gcc" "collective/CMakeFiles/collective.dir/shard.cpp.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  "/work/wt-coll/build-tsan/tensor/CMakeFiles/tensor.dir/DependInfo.cmake"
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
