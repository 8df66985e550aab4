
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/wt-coll/tensor/bfloat16.cpp" "tensor/CMakeFiles/tensor.dir/bfloat16.cpp.o" "gcc" "tensor/CMakeFiles/tensor.dir/bfloat16.cpp.o.d"
  "/work/wt-coll/tensor/compute.cpp" "tensor/CMakeFiles/tensor.dir/compute.cpp.o" "gcc" "tensor/CMakeFiles/tensor.dir/compute.cpp.o.d"
  "/work/wt-coll/tensor/dtype.cpp" "tensor/CMakeFiles/tensor.dir/dtype.cpp.o" "gcc" "tensor/CMakeFiles/tensor.dir/dtype.cpp.o.d"
  "/work/wt-coll/tensor/matmul.cpp" "tensor/CMakeFiles/tensor.dir/matmul.cpp.o" "gcc" "tensor/CMakeFiles/tensor.dir/matmul.cpp.o.d"
  "/work/wt-coll/tensor/matmul_onednn.cpp" "tensor/CMakeFiles/tensor.dir/matmul_onednn.cpp.o" "gcc" "tensor/CMakeFiles/tensor.dir/matmul_onednn.cpp.o.d"
  "/work/wt-coll/tensor/matmul_reference.cpp" "tensor/CMakeFiles/tensor.dir/matmul_reference.cpp.o" "gcc" "tensor/CMakeFiles/tensor.dir/matmul_reference.cpp.o.d"
  "/work/wt-coll/tensor/nn_ops.cpp" "tensor/CMakeFiles/tensor.dir/nn_ops.cpp.o" "gcc" "tensor/CMakeFiles/tensor.dir/nn_ops.cpp.o.d"
  "/work/wt-coll/tensor/nn_ops_onednn.cpp" "tensor/CMakeFiles/tensor.dir/nn_ops_onednn.cpp.o" "gcc" "tensor/CMakeFiles/tensor.dir/nn_ops_onednn.cpp.o.d"
  "/work/wt-coll/tensor/tensor.cpp" "tensor/CMakeFiles/tensor.dir/tensor.cpp.o" "gcc" "tensor/CMakeFiles/tensor.dir/tensor.cpp.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
