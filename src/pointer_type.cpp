// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/detail/pointer_type.hpp"

#include "cudapmr/detail/cuda_check.hpp"

namespace cudapmr::detail {

std::optional<cudaMemoryType> pointer_memory_type(const void* p) noexcept {
  cudaPointerAttributes attributes{};
  if (!recover_from(cudaPointerGetAttributes(&attributes, p))) return std::nullopt;
  return attributes.type;
}

}  // namespace cudapmr::detail
