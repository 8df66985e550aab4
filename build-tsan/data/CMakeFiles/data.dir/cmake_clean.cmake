file(REMOVE_RECURSE
  "CMakeFiles/data.dir/dataset.cpp.o"
  "CMakeFiles/data.dir/dataset.cpp.o.d"
  "CMakeFiles/data.dir/fashion_mnist.cpp.o"
  "CMakeFiles/data.dir/fashion_mnist.cpp.o.d"
  "CMakeFiles/data.dir/synthetic.cpp.o"
  "CMakeFiles/data.dir/synthetic.cpp.o.d"
  "libdata.a"
  "libdata.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/data.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
