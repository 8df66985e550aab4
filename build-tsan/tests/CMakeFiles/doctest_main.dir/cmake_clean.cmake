file(REMOVE_RECURSE
  "CMakeFiles/doctest_main.dir/doctest_main.cpp.o"
  "CMakeFiles/doctest_main.dir/doctest_main.cpp.o.d"
  "libdoctest_main.a"
  "libdoctest_main.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/doctest_main.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
