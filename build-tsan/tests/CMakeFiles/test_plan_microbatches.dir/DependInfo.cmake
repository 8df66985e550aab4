
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/wt-coll/tests/test_plan_microbatches.cpp" "tests/CMakeFiles/test_plan_microbatches.dir/test_plan_microbatches.cpp.o" "gcc" "tests/CMakeFiles/test_plan_microbatches.dir/test_plan_microbatches.cpp.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  "/work/wt-coll/build-tsan/tests/CMakeFiles/doctest_main.dir/DependInfo.cmake"
  "/work/wt-coll/build-tsan/plan/CMakeFiles/plan.dir/DependInfo.cmake"
  "/work/wt-coll/build-tsan/data/CMakeFiles/data.dir/DependInfo.cmake"
  "/work/wt-coll/build-tsan/model/CMakeFiles/model.dir/DependInfo.cmake"
  "/work/wt-coll/build-tsan/schedule/CMakeFiles/schedule.dir/DependInfo.cmake"
  "/work/wt-coll/build-tsan/tensor/CMakeFiles/tensor.dir/DependInfo.cmake"
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
