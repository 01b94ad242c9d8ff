// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file pinned_memory_resource.hpp
/// Page-locked host memory, drawn from a host memory pool that every device can reach.

#include "cudapmr/host_topology.hpp"
#include "cudapmr/pool_resource.hpp"

#include <cstddef>
#include <optional>
#include <string>

namespace cudapmr {

/// Options for a pinned host pool that the resource creates and owns.
struct pinned_pool_options {
  std::size_t initial_size = 0;
  /// The most the pool may reserve; 0 lets CUDA choose.
  std::size_t max_size = 0;
  std::size_t release_threshold = keep_all_memory;
  /// The host NUMA node whose memory backs the pool (`host_numa_nodes()`
  /// lists them). Empty: the node nearest the current device
  /// (`nearest_numa_node`). `any_numa_node`: wherever the kernel puts it.
  std::optional<int> numa_node;
};

/// Pinned host memory: host-accessible and readable and writable by kernels
/// on every device. `device_id()` is -1. A leaf: every allocation is a CUDA
/// call (`default_pinned_resource()`, in adaptors/caching_resource.hpp, is a
/// cache over the default pool).
///
/// Its pages are on one NUMA node, by default the one nearest the current
/// device: copies through the far socket of a two-socket server lose much of
/// their bandwidth. Where CUDA refuses a pool on a node (a driver without
/// host NUMA pools), the pool is CUDA's plain host pool and `placement_note()`
/// says why; nothing is thrown.
class pinned_memory_resource final : public pool_resource {
 public:
  /// Uses the driver's default pinned pool of the node nearest the current device.
  /// \throws cuda_error where no device exists.
  pinned_memory_resource();
  /// Creates and owns a new pinned host pool.
  /// \throws std::invalid_argument for a `numa_node` the machine does not
  /// have (before any CUDA call); cuda_error.
  explicit pinned_memory_resource(const pinned_pool_options& options);

  /// The NUMA node the pool's pages are on; empty where the kernel chooses.
  [[nodiscard]] std::optional<int> numa_node() const noexcept { return host_numa_node(); }
};

}  // namespace cudapmr
