# SPDX-License-Identifier: Apache-2.0
# Builds cudapmr's host code with the compiler's sanitizers:
#   cmake -S . -B build-asan -DCUDAPMR_SANITIZE=address,undefined   (or: cmake --preset asan)
#   cmake -S . -B build-tsan -DCUDAPMR_SANITIZE=thread              (or: cmake --preset tsan)
# Every C++ file of this project is instrumented, and the host side of the
# .cu files too (through -Xcompiler; device code is never instrumented: use
# compute-sanitizer for it, test/run_sanitizers.sh). UBSan's findings are
# errors, not warnings. Running the tests needs ASAN_OPTIONS=protect_shadow_gap=0
# where a GPU exists (the CUDA driver maps memory in ASan's shadow gap); .ci/run
# shows the full set of options.
set(CUDAPMR_SANITIZE "" CACHE STRING
    "Sanitizers for the host code, comma-separated (address,undefined,leak,thread); empty for none")

set(cudapmr_sanitizer_flags)
set(cudapmr_sanitizer_compile_options)
set(cudapmr_sanitizer_link_options)
if(CUDAPMR_SANITIZE)
  string(REPLACE "," ";" cudapmr_sanitizers "${CUDAPMR_SANITIZE}")
  foreach(sanitizer IN LISTS cudapmr_sanitizers)
    if(NOT sanitizer MATCHES "^(address|undefined|leak|thread)$")
      message(FATAL_ERROR "CUDAPMR_SANITIZE: unknown sanitizer '${sanitizer}' "
                          "(known: address, undefined, leak, thread)")
    endif()
    list(APPEND cudapmr_sanitizer_flags -fsanitize=${sanitizer})
  endforeach()
  # nvcc splits -Xcompiler values at commas, so each flag is passed on its own.
  foreach(flag IN LISTS cudapmr_sanitizer_flags)
    list(APPEND cudapmr_sanitizer_link_options
         $<$<LINK_LANGUAGE:CXX>:${flag}> $<$<LINK_LANGUAGE:CUDA>:-Xcompiler=${flag}>)
  endforeach()
  # Whole call stacks in reports; any UBSan finding stops the program.
  foreach(flag IN LISTS cudapmr_sanitizer_flags ITEMS -fno-omit-frame-pointer -fno-sanitize-recover=all)
    list(APPEND cudapmr_sanitizer_compile_options
         $<$<COMPILE_LANGUAGE:CXX>:${flag}> $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=${flag}>)
  endforeach()
  add_compile_options(${cudapmr_sanitizer_compile_options})
  message(STATUS "cudapmr: host code built with -fsanitize=${CUDAPMR_SANITIZE}")
endif()

# A sanitized static library needs the sanitizer runtimes wherever it is
# linked, in this build and in projects that use the installed package.
function(cudapmr_link_sanitizers target)
  if(cudapmr_sanitizer_link_options)
    target_link_options(${target} INTERFACE ${cudapmr_sanitizer_link_options})
  endif()
endfunction()

# For a test whose program is not ours (Python loading a sanitized library):
# ASan's runtime must be loaded first, and that program's own leaks are not
# cudapmr's to report.
function(cudapmr_sanitize_foreign_host test)
  if(NOT "address" IN_LIST cudapmr_sanitizers)
    return()
  endif()
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libasan.so
                  OUTPUT_VARIABLE asan_runtime OUTPUT_STRIP_TRAILING_WHITESPACE)
  set_property(TEST ${test} APPEND PROPERTY ENVIRONMENT_MODIFICATION
               "LD_PRELOAD=set:${asan_runtime}" "ASAN_OPTIONS=string_append::detect_leaks=0")
endfunction()
