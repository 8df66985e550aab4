file(REMOVE_RECURSE
  "CMakeFiles/test_training_resume.dir/test_training_resume.cpp.o"
  "CMakeFiles/test_training_resume.dir/test_training_resume.cpp.o.d"
  "test_training_resume"
  "test_training_resume.pdb"
  "test_training_resume_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_training_resume.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
