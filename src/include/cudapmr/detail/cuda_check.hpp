// SPDX-License-Identifier: Apache-2.0
#pragma once
// Checking CUDA calls whose error message needs more than the call's text.

#include "cudapmr/error.hpp"

#include <cuda_runtime_api.h>

#include <utility>

namespace cudapmr::detail {

/// Unless `status` is cudaSuccess: clears CUDA's last error and throws
/// cuda_error with the context `describe()` builds (only on failure).
template <class Describe>
void check_cuda(cudaError_t status, Describe&& describe) {
  if (status != cudaSuccess) [[unlikely]] {
    static_cast<void>(cudaGetLastError());
    throw cuda_error(status, std::forward<Describe>(describe)());
  }
}

}  // namespace cudapmr::detail
