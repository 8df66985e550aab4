
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/wt-coll/schedule/action.cpp" "schedule/CMakeFiles/schedule.dir/action.cpp.o" "gcc" "schedule/CMakeFiles/schedule.dir/action.cpp.o.d"
  "/work/wt-coll/schedule/generators.cpp" "schedule/CMakeFiles/schedule.dir/generators.cpp.o" "gcc" "schedule/CMakeFiles/schedule.dir/generators.cpp.o.d"
  "/work/wt-coll/schedule/grid_io.cpp" "schedule/CMakeFiles/schedule.dir/grid_io.cpp.o" "gcc" "schedule/CMakeFiles/schedule.dir/grid_io.cpp.o.d"
  "/work/wt-coll/schedule/simulate.cpp" "schedule/CMakeFiles/schedule.dir/simulate.cpp.o" "gcc" "schedule/CMakeFiles/schedule.dir/simulate.cpp.o.d"
  "/work/wt-coll/schedule/svg.cpp" "schedule/CMakeFiles/schedule.dir/svg.cpp.o" "gcc" "schedule/CMakeFiles/schedule.dir/svg.cpp.o.d"
  "/work/wt-coll/schedule/validate.cpp" "schedule/CMakeFiles/schedule.dir/validate.cpp.o" "gcc" "schedule/CMakeFiles/schedule.dir/validate.cpp.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
