// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file device_memory_resource.hpp
/// Device-local GPU memory, drawn from a device memory pool.

#include "cudapmr/pool_resource.hpp"

#include <cstddef>

namespace cudapmr {

/// Options for a device pool that the resource creates and owns.
struct device_pool_options {
  /// Bytes reserved at construction.
  std::size_t initial_size = 0;
  /// The most the pool may reserve; 0 lets CUDA choose (all of the device).
  std::size_t max_size = 0;
  /// Reserved memory above this is returned to the system at synchronization.
  std::size_t release_threshold = keep_all_memory;
  /// Whether the pool can be shared with other processes (POSIX file descriptor).
  bool ipc_enabled = false;
};

/// Device memory of one GPU: device-accessible, not host-accessible.
class device_memory_resource final : public pool_resource {
 public:
  /// Uses `device`'s default pool (its release threshold is set to keep all memory).
  /// \throws cuda_error where no device exists; std::invalid_argument for a bad ordinal.
  explicit device_memory_resource(int device);
  /// Creates and owns a new pool on `device`.
  device_memory_resource(int device, const device_pool_options& options);

  /// Lets kernels and copies on `device` read and write all of this pool's
  /// memory, allocated before or after (cudaMemPoolSetAccess). The pool's own
  /// device always has access; over a default pool this changes the pool for
  /// all its users. Synchronous. \throws std::invalid_argument for a bad
  /// ordinal; cuda_error (cudaErrorPeerAccessUnsupported) where `device` cannot reach this device.
  void enable_access_from(int device);
  /// Withdraws `device`'s access; its work on this memory must be complete.
  /// \throws std::invalid_argument for a bad ordinal or the pool's own device; cuda_error.
  void disable_access_from(int device);
  /// Whether `device` can read and write this pool's memory.
  /// \throws std::invalid_argument for a bad ordinal; cuda_error.
  [[nodiscard]] bool is_accessible_from(int device) const;
};

/// The per-device default resource over the device's default pool, like
/// cuda.core's `Device.memory_resource`. Lives until the process exits.
/// \throws as `device_memory_resource(int)`.
[[nodiscard]] device_memory_resource& default_device_resource(int device);

}  // namespace cudapmr
