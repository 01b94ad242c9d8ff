// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/detail/pointer_type.hpp"

namespace cudapmr::detail {

std::optional<cudaMemoryType> pointer_memory_type(const void* p) noexcept {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());  // the next, unrelated call must not see this failure
    return std::nullopt;
  }
  return attributes.type;
}

}  // namespace cudapmr::detail
