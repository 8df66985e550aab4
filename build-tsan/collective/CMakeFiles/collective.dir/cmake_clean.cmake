file(REMOVE_RECURSE
  "CMakeFiles/collective.dir/local_group.cpp.o"
  "CMakeFiles/collective.dir/local_group.cpp.o.d"
  "CMakeFiles/collective.dir/shard.cpp.o"
  "CMakeFiles/collective.dir/shard.cpp.o.d"
  "libcollective.a"
  "libcollective.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/collective.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
