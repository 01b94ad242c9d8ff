# SPDX-License-Identifier: Apache-2.0
# Finds hwloc (Debian's libhwloc-dev): hwloc.h and libhwloc, under HWLOC_ROOT,
# CMAKE_PREFIX_PATH or the system's folders; no pkg-config needed. Defines
# HWLOC_FOUND, HWLOC_VERSION and the imported target HWLOC::hwloc (its shared
# library, as the dynamic loader will find it at run time).
find_path(HWLOC_INCLUDE_DIR hwloc.h HINTS ${HWLOC_ROOT} $ENV{HWLOC_ROOT} PATH_SUFFIXES include)
find_library(HWLOC_LIBRARY NAMES hwloc HINTS ${HWLOC_ROOT} $ENV{HWLOC_ROOT} PATH_SUFFIXES lib lib64)

# Debian keeps the generated config.h in the multiarch folder (include/x86_64-linux-gnu).
find_path(HWLOC_CONFIG_DIR hwloc/autogen/config.h HINTS ${HWLOC_INCLUDE_DIR} ${HWLOC_ROOT} $ENV{HWLOC_ROOT}
          PATH_SUFFIXES include)
if(HWLOC_CONFIG_DIR)
  file(STRINGS "${HWLOC_CONFIG_DIR}/hwloc/autogen/config.h" hwloc_version_line
       REGEX "^#define HWLOC_VERSION \"[0-9.]+")
  string(REGEX REPLACE ".*\"([0-9.]+).*" "\\1" HWLOC_VERSION "${hwloc_version_line}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(HWLOC REQUIRED_VARS HWLOC_LIBRARY HWLOC_INCLUDE_DIR VERSION_VAR HWLOC_VERSION)
mark_as_advanced(HWLOC_INCLUDE_DIR HWLOC_CONFIG_DIR HWLOC_LIBRARY)

if(HWLOC_FOUND AND NOT TARGET HWLOC::hwloc)
  add_library(HWLOC::hwloc UNKNOWN IMPORTED)
  set_target_properties(HWLOC::hwloc PROPERTIES
    IMPORTED_LOCATION "${HWLOC_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${HWLOC_INCLUDE_DIR};${HWLOC_CONFIG_DIR}")
endif()
