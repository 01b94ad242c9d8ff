# SPDX-License-Identifier: Apache-2.0
# The version header, the install rules and the CMake package that lets other
# projects call find_package(cudapmr CONFIG REQUIRED).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

configure_file(${PROJECT_SOURCE_DIR}/cmake/version.hpp.in ${PROJECT_BINARY_DIR}/include/cudapmr/version.hpp @ONLY)
target_include_directories(cudapmr PUBLIC $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>)

set(cudapmr_package_dir ${CMAKE_INSTALL_LIBDIR}/cmake/cudapmr)
install(TARGETS cudapmr EXPORT cudapmrTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/ ${PROJECT_BINARY_DIR}/include/
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.hpp")
install(EXPORT cudapmrTargets NAMESPACE cudapmr:: DESTINATION ${cudapmr_package_dir})

# Each component in an export set of its own, which cudapmrConfig.cmake loads
# when find_package(cudapmr COMPONENTS ...) asks for it.
foreach(component interop multiprocess nccl)
  if(TARGET cudapmr_${component})
    install(TARGETS cudapmr_${component} EXPORT cudapmr_${component}Targets
      ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
      LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
    install(EXPORT cudapmr_${component}Targets NAMESPACE cudapmr:: DESTINATION ${cudapmr_package_dir})
  endif()
endforeach()
if(TARGET cudapmr_nccl)
  install(FILES ${PROJECT_SOURCE_DIR}/cmake/FindNCCL.cmake DESTINATION ${cudapmr_package_dir})
endif()
# The core links hwloc: its consumers find it as the build did (HWLOC_ROOT included).
install(FILES ${PROJECT_SOURCE_DIR}/cmake/FindHWLOC.cmake DESTINATION ${cudapmr_package_dir})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/cudapmrConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cudapmrConfig.cmake
  INSTALL_DESTINATION ${cudapmr_package_dir})
# 0.x releases may break compatibility with each minor version.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cudapmrConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cudapmrConfig.cmake ${PROJECT_BINARY_DIR}/cudapmrConfigVersion.cmake
  DESTINATION ${cudapmr_package_dir})
