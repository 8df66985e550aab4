file(REMOVE_RECURSE
  "CMakeFiles/test_training_divergence.dir/test_training_divergence.cpp.o"
  "CMakeFiles/test_training_divergence.dir/test_training_divergence.cpp.o.d"
  "test_training_divergence"
  "test_training_divergence.pdb"
  "test_training_divergence_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_training_divergence.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
