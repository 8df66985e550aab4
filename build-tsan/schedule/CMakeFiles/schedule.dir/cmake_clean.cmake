file(REMOVE_RECURSE
  "CMakeFiles/schedule.dir/action.cpp.o"
  "CMakeFiles/schedule.dir/action.cpp.o.d"
  "CMakeFiles/schedule.dir/generators.cpp.o"
  "CMakeFiles/schedule.dir/generators.cpp.o.d"
  "CMakeFiles/schedule.dir/grid_io.cpp.o"
  "CMakeFiles/schedule.dir/grid_io.cpp.o.d"
  "CMakeFiles/schedule.dir/simulate.cpp.o"
  "CMakeFiles/schedule.dir/simulate.cpp.o.d"
  "CMakeFiles/schedule.dir/svg.cpp.o"
  "CMakeFiles/schedule.dir/svg.cpp.o.d"
  "CMakeFiles/schedule.dir/validate.cpp.o"
  "CMakeFiles/schedule.dir/validate.cpp.o.d"
  "libschedule.a"
  "libschedule.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/schedule.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
