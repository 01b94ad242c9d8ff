# SPDX-License-Identifier: Apache-2.0
# The package_consumer test: installs the current build into a fresh prefix,
# then configures, builds and runs test/consumer against it. Run as
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... -DCXX_COMPILER=... -DCUDA_ROOT=... -P run_consumer_test.cmake
foreach(variable BUILD_DIR SOURCE_DIR WORK_DIR CXX_COMPILER CUDA_ROOT)
  if(NOT DEFINED ${variable})
    message(FATAL_ERROR "run_consumer_test.cmake needs -D${variable}=...")
  endif()
endforeach()

function(run_step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${name} failed (${result}):\n${output}")
  endif()
  message(STATUS "${name}: ok")
  set(step_output "${output}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK_DIR}/prefix)
set(consumer_build ${WORK_DIR}/build)
file(REMOVE_RECURSE ${WORK_DIR})

run_step("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

# A static library's private, header-only dependencies must not reach its users.
file(GLOB export_files ${prefix}/lib/cmake/cudapmr/*Targets*.cmake)
foreach(export_file IN LISTS export_files)
  file(READ ${export_file} exported)
  if(exported MATCHES "fmt::|dlpack::")
    message(FATAL_ERROR "${export_file} names fmt or dlpack, which users need not have")
  endif()
endforeach()
foreach(component interop multiprocess)
  if(NOT EXISTS ${prefix}/lib/cmake/cudapmr/cudapmr_${component}Targets.cmake)
    message(FATAL_ERROR "the component ${component} was not installed")
  endif()
endforeach()

run_step("configure the consumer" ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${consumer_build}
  -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCUDAToolkit_ROOT=${CUDA_ROOT}
  -DCMAKE_BUILD_TYPE=Release)
run_step("build the consumer" ${CMAKE_COMMAND} --build ${consumer_build})
run_step("run the consumer" ${consumer_build}/consumer)
message(STATUS "${step_output}")
