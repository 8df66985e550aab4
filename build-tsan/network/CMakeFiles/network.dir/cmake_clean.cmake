file(REMOVE_RECURSE
  "CMakeFiles/network.dir/handshake.cpp.o"
  "CMakeFiles/network.dir/handshake.cpp.o.d"
  "CMakeFiles/network.dir/message_types.cpp.o"
  "CMakeFiles/network.dir/message_types.cpp.o.d"
  "CMakeFiles/network.dir/port_probe.cpp.o"
  "CMakeFiles/network.dir/port_probe.cpp.o.d"
  "CMakeFiles/network.dir/wire_format.cpp.o"
  "CMakeFiles/network.dir/wire_format.cpp.o.d"
  "libnetwork.a"
  "libnetwork.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/network.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
