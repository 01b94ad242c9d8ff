// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/detail/driver_entry_point.hpp"

#include "cudapmr/detail/cuda_check.hpp"

#include <cuda_runtime_api.h>

namespace cudapmr::detail {

void* driver_entry_point(const char* name) noexcept {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (!recover_from(cudaGetDriverEntryPointByVersion(name, &function, 12000, cudaEnableDefault, &found)) ||
      found != cudaDriverEntryPointSuccess)
    return nullptr;
  return function;
}

}  // namespace cudapmr::detail
