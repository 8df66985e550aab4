# Libraries whose Debian packages ship no usable CMake config, wrapped as imported targets: CAF 0.17 ships
# none, and Debian's dnnl-config.cmake insists on the OpenCL headers (its GPU runtime is OCL), which the
# CPU path never uses. The build calls actorpipe_wrap_library; the installed package
# config (actorpipe-config.cmake) replays the same calls, so a project linking actorpipe::actorpipe finds
# the same libraries with no wrapper of its own.
#
#   actorpipe_wrap_library(CAF::io VARIABLE CAF_IO HEADER caf/io/all.hpp LIBRARY caf_io LINK CAF::core)
#
# defines CAF::io (unless a target of that name exists) from the cache variables CAF_IO_INCLUDE_DIR and
# CAF_IO_LIBRARY, found by the header's and the library's names; LINK lists what its users must link too.
function(actorpipe_wrap_library target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "VARIABLE;HEADER;LIBRARY" "LINK")
  if(NOT arg_VARIABLE OR NOT arg_HEADER OR NOT arg_LIBRARY)
    message(FATAL_ERROR "actorpipe_wrap_library(${target}): VARIABLE, HEADER and LIBRARY are required")
  endif()
  string(JOIN " " call ${ARGV})
  set_property(GLOBAL APPEND PROPERTY ACTORPIPE_WRAPPED_LIBRARIES "actorpipe_wrap_library(${call})")
  if(TARGET ${target})
    return()
  endif()
  find_path(${arg_VARIABLE}_INCLUDE_DIR ${arg_HEADER} REQUIRED)
  find_library(${arg_VARIABLE}_LIBRARY ${arg_LIBRARY} REQUIRED)
  add_library(${target} UNKNOWN IMPORTED)
  set_target_properties(${target} PROPERTIES IMPORTED_LOCATION "${${arg_VARIABLE}_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${${arg_VARIABLE}_INCLUDE_DIR}" INTERFACE_LINK_LIBRARIES "${arg_LINK}")
endfunction()
