// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file pinned_memory_resource.hpp
/// Page-locked host memory, drawn from a host memory pool that every device can reach.

#include "cudapmr/pool_resource.hpp"

#include <cstddef>

namespace cudapmr {

/// Options for a pinned host pool that the resource creates and owns.
struct pinned_pool_options {
  std::size_t initial_size = 0;
  /// The most the pool may reserve; 0 lets CUDA choose.
  std::size_t max_size = 0;
  std::size_t release_threshold = keep_all_memory;
};

/// Pinned host memory: host-accessible and readable and writable by kernels
/// on every device. `device_id()` is -1. A leaf: every allocation is a CUDA
/// call (`default_pinned_resource()`, in adaptors/caching_resource.hpp, is a
/// cache over the default pool).
class pinned_memory_resource final : public pool_resource {
 public:
  /// Uses the driver's default pinned host pool.
  /// \throws cuda_error where no device exists.
  pinned_memory_resource();
  /// Creates and owns a new pinned host pool.
  explicit pinned_memory_resource(const pinned_pool_options& options);
};

}  // namespace cudapmr
