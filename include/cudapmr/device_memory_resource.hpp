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
};

/// The per-device default resource over the device's default pool, like
/// cuda.core's `Device.memory_resource`. Lives until the process exits.
/// \throws as `device_memory_resource(int)`.
[[nodiscard]] device_memory_resource& default_device_resource(int device);

}  // namespace cudapmr
