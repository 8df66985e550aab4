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

# The package config replays the build's wrapped libraries (cmake/wrapped_libraries.cmake).
get_property(wrapped_calls GLOBAL PROPERTY ACTORPIPE_WRAPPED_LIBRARIES)
list(REMOVE_DUPLICATES wrapped_calls)
string(JOIN "\n" ACTORPIPE_WRAPPED_LIBRARY_CALLS ${wrapped_calls})
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
set(deb_depends libcaf-dev libxtensor-dev libxtensor-blas-dev libopenblas-dev zlib1g-dev nlohmann-json3-dev libgomp1)
if(AP_COMPUTE STREQUAL "onednn")
  list(APPEND deb_depends libdnnl-dev)
endif()
string(JOIN ", " CPACK_DEBIAN_PACKAGE_DEPENDS ${deb_depends})
set(CPACK_GENERATOR DEB)
include(CPack)
