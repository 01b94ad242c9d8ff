# SPDX-License-Identifier: Apache-2.0
# RMM 26.x, where CUDAPMR_RMM_ROOT names a folder with the PyPI wheels
# librmm-cu13 and rapids-logger unpacked in it (librmm/ and rapids_logger/):
# the bench's RMM peers and apps/examples/rmm_interop use it through
# cudapmr_use_rmm(target). Their CMake package asks for CMake 4, so the two
# libraries are taken as they are. RMM brings a newer CCCL than the toolkit's:
# its headers come first in the programs that include RMM, and nothing else
# of the project includes them. Such a program still links the library built
# against the toolkit's CCCL: that holds while the CCCL types in cudapmr's
# interface (cuda::stream_ref, one cudaStream_t) keep their layout and name.
set(CUDAPMR_RMM_ROOT "" CACHE PATH
    "Folder with the librmm-cu13 and rapids-logger wheels unpacked (RMM's peers in the bench, the RMM example)")
if(NOT CUDAPMR_RMM_ROOT AND CUDAPMR_BENCH_RMM_ROOT)  # the bench's earlier name for it
  set(CUDAPMR_RMM_ROOT "${CUDAPMR_BENCH_RMM_ROOT}" CACHE PATH "" FORCE)
endif()
if(CUDAPMR_RMM_ROOT AND NOT TARGET cudapmr_rmm)
  find_library(CUDAPMR_RMM_LIBRARY rmm PATHS ${CUDAPMR_RMM_ROOT}/librmm/lib64 NO_DEFAULT_PATH)
  find_library(CUDAPMR_RAPIDS_LOGGER_LIBRARY rapids_logger PATHS ${CUDAPMR_RMM_ROOT}/rapids_logger/lib64
               NO_DEFAULT_PATH)
  if(CUDAPMR_RMM_LIBRARY AND CUDAPMR_RAPIDS_LOGGER_LIBRARY)
    add_library(cudapmr_rmm INTERFACE)  # a marker: RMM was found
    message(STATUS "cudapmr: RMM found under ${CUDAPMR_RMM_ROOT}: the bench's RMM peers and the RMM example are built")
  else()
    message(WARNING "cudapmr: no librmm.so and librapids_logger.so under ${CUDAPMR_RMM_ROOT}")
  endif()
endif()

# Compiles `target` against RMM's headers, RMM's CCCL ahead of the toolkit's
# (which cudapmr::cudapmr adds: an interface directory of a linked target would
# come after it), links RMM, and puts RMM's two libraries beside `target`,
# whose run path is $ORIGIN.
function(cudapmr_use_rmm target)
  target_include_directories(${target} SYSTEM BEFORE PRIVATE
    ${CUDAPMR_RMM_ROOT}/librmm/include ${CUDAPMR_RMM_ROOT}/librmm/include/rapids
    ${CUDAPMR_RMM_ROOT}/rapids_logger/include)
  target_link_libraries(${target} PRIVATE ${CUDAPMR_RMM_LIBRARY} ${CUDAPMR_RAPIDS_LOGGER_LIBRARY})
  set_target_properties(${target} PROPERTIES BUILD_RPATH "$ORIGIN")
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND ${CMAKE_COMMAND} -E copy_if_different ${CUDAPMR_RMM_LIBRARY} ${CUDAPMR_RAPIDS_LOGGER_LIBRARY}
            $<TARGET_FILE_DIR:${target}>
    VERBATIM)
endfunction()
