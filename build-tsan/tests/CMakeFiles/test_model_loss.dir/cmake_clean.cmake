file(REMOVE_RECURSE
  "CMakeFiles/test_model_loss.dir/test_model_loss.cpp.o"
  "CMakeFiles/test_model_loss.dir/test_model_loss.cpp.o.d"
  "test_model_loss"
  "test_model_loss.pdb"
  "test_model_loss_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_model_loss.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
