file(REMOVE_RECURSE
  "CMakeFiles/checkpoint.dir/checkpoint.cpp.o"
  "CMakeFiles/checkpoint.dir/checkpoint.cpp.o.d"
  "CMakeFiles/checkpoint.dir/named_tensors.cpp.o"
  "CMakeFiles/checkpoint.dir/named_tensors.cpp.o.d"
  "CMakeFiles/checkpoint.dir/safetensors.cpp.o"
  "CMakeFiles/checkpoint.dir/safetensors.cpp.o.d"
  "libcheckpoint.a"
  "libcheckpoint.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/checkpoint.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
