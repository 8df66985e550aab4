file(REMOVE_RECURSE
  "CMakeFiles/tensor.dir/bfloat16.cpp.o"
  "CMakeFiles/tensor.dir/bfloat16.cpp.o.d"
  "CMakeFiles/tensor.dir/compute.cpp.o"
  "CMakeFiles/tensor.dir/compute.cpp.o.d"
  "CMakeFiles/tensor.dir/dtype.cpp.o"
  "CMakeFiles/tensor.dir/dtype.cpp.o.d"
  "CMakeFiles/tensor.dir/matmul.cpp.o"
  "CMakeFiles/tensor.dir/matmul.cpp.o.d"
  "CMakeFiles/tensor.dir/matmul_onednn.cpp.o"
  "CMakeFiles/tensor.dir/matmul_onednn.cpp.o.d"
  "CMakeFiles/tensor.dir/matmul_reference.cpp.o"
  "CMakeFiles/tensor.dir/matmul_reference.cpp.o.d"
  "CMakeFiles/tensor.dir/nn_ops.cpp.o"
  "CMakeFiles/tensor.dir/nn_ops.cpp.o.d"
  "CMakeFiles/tensor.dir/nn_ops_onednn.cpp.o"
  "CMakeFiles/tensor.dir/nn_ops_onednn.cpp.o.d"
  "CMakeFiles/tensor.dir/tensor.cpp.o"
  "CMakeFiles/tensor.dir/tensor.cpp.o.d"
  "libtensor.a"
  "libtensor.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/tensor.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
