
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/wt-coll/data/dataset.cpp" "data/CMakeFiles/data.dir/dataset.cpp.o" "gcc" "data/CMakeFiles/data.dir/dataset.cpp.o.d"
  "/work/wt-coll/data/fashion_mnist.cpp" "data/CMakeFiles/data.dir/fashion_mnist.cpp.o" "gcc" "data/CMakeFiles/data.dir/fashion_mnist.cpp.o.d"
  "/work/wt-coll/data/synthetic.cpp" "data/CMakeFiles/data.dir/synthetic.cpp.o" "gcc" "data/CMakeFiles/data.dir/synthetic.cpp.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  "/work/wt-coll/build-tsan/tensor/CMakeFiles/tensor.dir/DependInfo.cmake"
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
