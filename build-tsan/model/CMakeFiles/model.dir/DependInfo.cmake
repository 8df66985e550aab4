
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/wt-coll/model/block.cpp" "model/CMakeFiles/model.dir/block.cpp.o" "gcc" "model/CMakeFiles/model.dir/block.cpp.o.d"
  "/work/wt-coll/model/dropout.cpp" "model/CMakeFiles/model.dir/dropout.cpp.o" "gcc" "model/CMakeFiles/model.dir/dropout.cpp.o.d"
  "/work/wt-coll/model/gelu.cpp" "model/CMakeFiles/model.dir/gelu.cpp.o" "gcc" "model/CMakeFiles/model.dir/gelu.cpp.o.d"
  "/work/wt-coll/model/layer.cpp" "model/CMakeFiles/model.dir/layer.cpp.o" "gcc" "model/CMakeFiles/model.dir/layer.cpp.o.d"
  "/work/wt-coll/model/layer_norm.cpp" "model/CMakeFiles/model.dir/layer_norm.cpp.o" "gcc" "model/CMakeFiles/model.dir/layer_norm.cpp.o.d"
  "/work/wt-coll/model/layer_registry.cpp" "model/CMakeFiles/model.dir/layer_registry.cpp.o" "gcc" "model/CMakeFiles/model.dir/layer_registry.cpp.o.d"
  "/work/wt-coll/model/layer_spec.cpp" "model/CMakeFiles/model.dir/layer_spec.cpp.o" "gcc" "model/CMakeFiles/model.dir/layer_spec.cpp.o.d"
  "/work/wt-coll/model/linear.cpp" "model/CMakeFiles/model.dir/linear.cpp.o" "gcc" "model/CMakeFiles/model.dir/linear.cpp.o.d"
  "/work/wt-coll/model/loss.cpp" "model/CMakeFiles/model.dir/loss.cpp.o" "gcc" "model/CMakeFiles/model.dir/loss.cpp.o.d"
  "/work/wt-coll/model/optimizer.cpp" "model/CMakeFiles/model.dir/optimizer.cpp.o" "gcc" "model/CMakeFiles/model.dir/optimizer.cpp.o.d"
  "/work/wt-coll/model/relu.cpp" "model/CMakeFiles/model.dir/relu.cpp.o" "gcc" "model/CMakeFiles/model.dir/relu.cpp.o.d"
  "/work/wt-coll/model/sequential.cpp" "model/CMakeFiles/model.dir/sequential.cpp.o" "gcc" "model/CMakeFiles/model.dir/sequential.cpp.o.d"
  "/work/wt-coll/model/sigmoid.cpp" "model/CMakeFiles/model.dir/sigmoid.cpp.o" "gcc" "model/CMakeFiles/model.dir/sigmoid.cpp.o.d"
  "/work/wt-coll/model/sleep_layer.cpp" "model/CMakeFiles/model.dir/sleep_layer.cpp.o" "gcc" "model/CMakeFiles/model.dir/sleep_layer.cpp.o.d"
  "/work/wt-coll/model/spec_text.cpp" "model/CMakeFiles/model.dir/spec_text.cpp.o" "gcc" "model/CMakeFiles/model.dir/spec_text.cpp.o.d"
  "/work/wt-coll/model/tanh.cpp" "model/CMakeFiles/model.dir/tanh.cpp.o" "gcc" "model/CMakeFiles/model.dir/tanh.cpp.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  "/work/wt-coll/build-tsan/tensor/CMakeFiles/tensor.dir/DependInfo.cmake"
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
