# `cmake --install` and `cpack -G DEB`: the public headers (cmake/public_headers.cmake) under
# <prefix>/include/actorpipe, the libraries, the `actorpipe` program, and the CMake package that
# find_package(actorpipe) reads (actorpipe::actorpipe with every library it needs). Included at the end of
# the top-level CMakeLists.txt, after cmake/library.cmake and cli/.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
include(${CMAKE_CURRENT_LIST_DIR}/public_headers.cmake)

set(package_dir ${CMAKE_INSTALL_LIBDIR}/cmake/actorpipe)

foreach(header ${actorpipe_public_headers})
  if(NOT EXISTS ${PROJECT_SOURCE_DIR}/${header})
    message(FATAL_ERROR "cmake/public_headers.cmake lists ${header}, which does not exist")
  endif()
  get_filename_component(folder ${header} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/actorpipe/${folder})
endforeach()
install(FILES ${PROJECT_BINARY_DIR}/generated/actorpipe/version.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/actorpipe)

# The headers include each other as "tensor/tensor.hpp" (relative to the source root, which is
# include/actorpipe once installed); users write <actorpipe/tensor/tensor.hpp>: both directories are public.
install(TARGETS ${actorpipe_libraries} actorpipe_library EXPORT actorpipe-targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} ${CMAKE_INSTALL_INCLUDEDIR}/actorpipe)
install(TARGETS actorpipe RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT actorpipe-targets NAMESPACE actorpipe:: DESTINATION ${package_dir})

# What the package config must find for its users, read from what the libraries link, publicly or privately
# (static libraries pass every dependency on to the executable), and what those link in turn:
# - a target of a CMake package (ZLIB::ZLIB) becomes find_dependency(ZLIB);
# - a wrapped library (cmake/wrapped_libraries.cmake: CAF, oneDNN) is wrapped again the same way;
# - any other imported target is re-created from its location on this machine, and one this directory
#   cannot see gets a warning here (test_install_consumer then fails on it).
# xtensor and xtensor-blas link by plain names: cmake/actorpipe-config.cmake.in finds them itself.
set(packages_by_namespace Threads OpenMP ZLIB nlohmann_json OpenSSL)
get_property(wrapped_calls GLOBAL PROPERTY ACTORPIPE_WRAPPED_LIBRARIES)
list(REMOVE_DUPLICATES wrapped_calls)
string(JOIN "\n" ACTORPIPE_WRAPPED_LIBRARY_CALLS ${wrapped_calls})

function(namespaced_targets_in out)  # Namespace::name items of the lists given, generator expressions or not
  string(JOIN " " text ${ARGN})
  string(REGEX MATCHALL "[A-Za-z0-9_.+-]+::[A-Za-z0-9_.+-]+" found "${text}")
  list(FILTER found EXCLUDE REGEX "^actorpipe::")
  set(${out} ${found} PARENT_SCOPE)
endfunction()
set(to_visit "")
foreach(library ${actorpipe_libraries})
  foreach(property INTERFACE_LINK_LIBRARIES LINK_LIBRARIES)
    get_target_property(links ${library} ${property})
    if(links)
      namespaced_targets_in(found ${links})
      list(APPEND to_visit ${found})
    endif()
  endforeach()
endforeach()
set(linked_targets "")
while(to_visit)
  list(POP_FRONT to_visit target)
  if(NOT target IN_LIST linked_targets)
    list(APPEND linked_targets ${target})
    if(TARGET ${target})
      get_target_property(links ${target} INTERFACE_LINK_LIBRARIES)
      if(links)
        namespaced_targets_in(found ${links})
        list(APPEND to_visit ${found})
      endif()
    endif()
  endif()
endwhile()
set(dependency_packages "")
set(recreated_targets "")  # text: a value may hold ';' (a list of links)
foreach(target ${linked_targets})
  string(REGEX REPLACE "::.*" "" namespace ${target})
  string(FIND "${ACTORPIPE_WRAPPED_LIBRARY_CALLS}" "actorpipe_wrap_library(${target} " wrapped)
  if(namespace IN_LIST packages_by_namespace)
    list(APPEND dependency_packages ${namespace})
  elseif(NOT wrapped EQUAL -1)
    # wrapped again by ACTORPIPE_WRAPPED_LIBRARY_CALLS
  elseif(TARGET ${target})
    set(values "")
    foreach(property IMPORTED_LOCATION INTERFACE_INCLUDE_DIRECTORIES INTERFACE_LINK_LIBRARIES)
      get_target_property(value ${target} ${property})
      if(value)
        string(APPEND values "\n    ${property} \"${value}\"")
      endif()
    endforeach()
    string(APPEND recreated_targets "if(NOT TARGET ${target})  # as found on the build machine
  add_library(${target} UNKNOWN IMPORTED)
  set_target_properties(${target} PROPERTIES${values})
endif()
")
  else()
    message(WARNING "The installed actorpipe package will not know how to find ${target}, which its libraries "
                    "link: wrap it with actorpipe_wrap_library (cmake/wrapped_libraries.cmake) or, if a CMake "
                    "package provides it, add its namespace to packages_by_namespace in cmake/install.cmake.")
  endif()
endforeach()
list(REMOVE_DUPLICATES dependency_packages)
list(TRANSFORM dependency_packages REPLACE "(.+)" "find_dependency(\\1)")
string(JOIN "\n" ACTORPIPE_FIND_DEPENDENCIES ${dependency_packages})
string(APPEND ACTORPIPE_FIND_DEPENDENCIES "\n${recreated_targets}")
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/actorpipe-config.cmake.in
  ${PROJECT_BINARY_DIR}/package/actorpipe-config.cmake
  INSTALL_DESTINATION ${package_dir} PATH_VARS CMAKE_INSTALL_INCLUDEDIR)
# 0.x: a minor version may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/actorpipe-config-version.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/package/actorpipe-config.cmake
              ${PROJECT_BINARY_DIR}/package/actorpipe-config-version.cmake
              ${CMAKE_CURRENT_LIST_DIR}/wrapped_libraries.cmake
        DESTINATION ${package_dir})

# cpack -G DEB (in the build directory): one package holding the whole install, depending on the Debian
# packages of what the libraries link (scripts/setup.sh installs the same ones).
set(CPACK_PACKAGE_NAME actorpipe)
set(CPACK_PACKAGE_VENDOR "actorpipe")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Pipeline-parallel training on CAF actors: library, headers, CMake package and the actorpipe program")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "actorpipe developers <actorpipe@localhost>")
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(deb_depends libcaf-dev libxtensor-dev libxtensor-blas-dev libopenblas-dev zlib1g-dev nlohmann-json3-dev libgomp1 libgloo-dev libpcre2-dev libisal-dev)
if(AP_COMPUTE STREQUAL "onednn")
  list(APPEND deb_depends libdnnl-dev)
endif()
string(JOIN ", " CPACK_DEBIAN_PACKAGE_DEPENDS ${deb_depends})
set(CPACK_GENERATOR DEB)
include(CPack)
