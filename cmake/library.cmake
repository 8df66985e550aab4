# actorpipe::actorpipe: the library a C++ project links (docs/library.md, "Using it as a library"). Included by the
# top-level CMakeLists.txt right after the folder libraries (tensor ... actors) and before anything that
# uses them: every library defined by then is part of it.

# The version header, <actorpipe/version.hpp>: the project version and the wire protocol version, read from
# actors/handshake.hpp (one place; CMake re-runs when that file changes).
set(handshake_header ${PROJECT_SOURCE_DIR}/actors/handshake.hpp)
file(STRINGS ${handshake_header} protocol_line REGEX "wire_protocol_version = [0-9]+")
string(REGEX REPLACE ".*wire_protocol_version = ([0-9]+).*" "\\1" ACTORPIPE_WIRE_PROTOCOL_VERSION "${protocol_line}")
if(NOT ACTORPIPE_WIRE_PROTOCOL_VERSION MATCHES "^[0-9]+$")
  message(FATAL_ERROR "cannot read 'wire_protocol_version = N;' from ${handshake_header}")
endif()
set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${handshake_header})
configure_file(${CMAKE_CURRENT_LIST_DIR}/version.hpp.in ${PROJECT_BINARY_DIR}/generated/actorpipe/version.hpp @ONLY)

# Every library the folders defined (random, tensor, ..., actors), in the order they were added.
set(actorpipe_libraries "")
get_property(library_folders DIRECTORY ${PROJECT_SOURCE_DIR} PROPERTY SUBDIRECTORIES)
foreach(folder ${library_folders})
  get_property(folder_targets DIRECTORY ${folder} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target ${folder_targets})
    get_target_property(type ${target} TYPE)
    if(type MATCHES "^(STATIC|SHARED|OBJECT|INTERFACE)_LIBRARY$")
      list(APPEND actorpipe_libraries ${target})
    endif()
    if(type MATCHES "^(STATIC|SHARED)_LIBRARY$")
      # Installed next to other projects' libraries: libactorpipe_model.a, not libmodel.a.
      set_target_properties(${target} PROPERTIES OUTPUT_NAME actorpipe_${target})
    endif()
    # The folders give their users the source root as include path ("tensor/tensor.hpp"): in this build
    # only; installed, the package gives <prefix>/include/actorpipe instead (cmake/install.cmake).
    get_target_property(include_dirs ${target} INTERFACE_INCLUDE_DIRECTORIES)
    if(include_dirs)
      set(build_only "")
      foreach(dir ${include_dirs})
        if(dir STREQUAL PROJECT_SOURCE_DIR)
          set(dir "$<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>")
        endif()
        list(APPEND build_only "${dir}")
      endforeach()
      set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${build_only}")
    endif()
  endforeach()
endforeach()

# tensor/CMakeLists.txt wraps oneDNN itself, in its own directory (Debian's dnnl-config.cmake wants the
# OpenCL headers): the package config must wrap it the same way when tensor links it.
get_target_property(tensor_links tensor LINK_LIBRARIES)
if("DNNL::dnnl" IN_LIST tensor_links)
  set_property(GLOBAL APPEND PROPERTY ACTORPIPE_WRAPPED_LIBRARIES
    "actorpipe_wrap_library(DNNL::dnnl VARIABLE DNNL HEADER oneapi/dnnl/dnnl.hpp LIBRARY dnnl)")
endif()

add_library(actorpipe_library INTERFACE)
set_target_properties(actorpipe_library PROPERTIES EXPORT_NAME actorpipe)  # actorpipe::actorpipe when installed
target_link_libraries(actorpipe_library INTERFACE ${actorpipe_libraries})
target_include_directories(actorpipe_library INTERFACE $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/generated>)
target_compile_features(actorpipe_library INTERFACE cxx_std_17)
add_library(actorpipe::actorpipe ALIAS actorpipe_library)  # the same name inside this build
