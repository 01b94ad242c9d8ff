# SPDX-License-Identifier: Apache-2.0
# Strict warnings for cudapmr's own targets; never exported to users.
function(cudapmr_set_warnings target)
  # Designated initializers that name only some options are the intended way
  # to fill the options structs, so missing-field-initializers stays off.
  set(cxx_warnings -Wall -Wextra -Wpedantic -Wconversion -Wsign-conversion -Wshadow
      -Wno-missing-field-initializers)
  if(CUDAPMR_WARNINGS_AS_ERRORS)
    list(APPEND cxx_warnings -Werror)
    set(cuda_werror -Werror=all-warnings)
  endif()
  list(JOIN cxx_warnings "," host_warnings)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${cxx_warnings}>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra ${cuda_werror}>)
endfunction()
