file(REMOVE_RECURSE
  "CMakeFiles/training.dir/trainer.cpp.o"
  "CMakeFiles/training.dir/trainer.cpp.o.d"
  "libtraining.a"
  "libtraining.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/training.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
