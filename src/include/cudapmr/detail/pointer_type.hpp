// SPDX-License-Identifier: Apache-2.0
#pragma once
// What CUDA knows about an address (src/pointer_type.cpp).

#include <cuda_runtime_api.h>

#include <optional>

namespace cudapmr::detail {

/// The kind of memory at `p` as CUDA reports it (`cudaMemoryTypeUnregistered`
/// for pageable host memory); nullopt where CUDA cannot answer (no device).
/// Leaves no CUDA error behind.
[[nodiscard]] std::optional<cudaMemoryType> pointer_memory_type(const void* p) noexcept;

}  // namespace cudapmr::detail
