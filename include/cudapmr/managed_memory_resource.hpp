// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file managed_memory_resource.hpp
/// Unified (managed) memory, migrated between host and devices on demand.

#include "cudapmr/managed_hints.hpp"
#include "cudapmr/pool_resource.hpp"

#include <cstddef>
#include <optional>

namespace cudapmr {

/// Options for a managed pool that the resource creates and owns. CUDA gives
/// managed pools no maximum size.
struct managed_pool_options {
  std::size_t initial_size = 0;
  /// Anything but `keep_all_memory` needs a `preferred_device`: a pool with no
  /// preferred location keeps its pages (`pool_resource::gives_memory_back`).
  std::size_t release_threshold = keep_all_memory;
  /// The device whose memory the pages prefer; none lets the driver decide.
  std::optional<int> preferred_device;
};

/// Managed memory: accessible from the host and from every device.
/// `device_id()` is the preferred device, or -1 where there is none. A leaf:
/// every allocation is a CUDA call (`default_managed_resource()`, in
/// adaptors/caching_resource.hpp, is a cache over the default pool).
class managed_memory_resource final : public pool_resource {
 public:
  /// Uses the driver's default managed pool (no preferred location), and
  /// sets its release threshold to `keep_all_memory`: it keeps its pages
  /// (`gives_memory_back()` is false). \throws cuda_error where no device exists.
  managed_memory_resource();
  /// Creates and owns a new managed pool.
  /// \throws std::invalid_argument for a release threshold other than
  ///   `keep_all_memory` with no preferred device (before any CUDA call), or a
  ///   preferred device out of range; cuda_error where no device exists.
  explicit managed_memory_resource(const managed_pool_options& options);

  /// Migrates the managed range [p, p + bytes) to `device`'s memory in stream
  /// order on `stream`, so that kernels there do not fault on it.
  /// \throws std::invalid_argument if the range is not managed memory or
  ///   `device` is out of range; cuda_error otherwise.
  void prefetch_to_device(const void* p, std::size_t bytes, int device, stream_ref stream) const;
  /// Migrates the managed range [p, p + bytes) to host memory in stream order
  /// on `stream`; synchronize before the host reads it. \throws as prefetch_to_device.
  void prefetch_to_host(const void* p, std::size_t bytes, stream_ref stream) const;
  /// Gives `advice` about the managed range [p, p + bytes) for `location`
  /// (ignored by the read-mostly advice); takes effect at once, in no stream
  /// order. \throws as prefetch_to_device.
  void advise(const void* p, std::size_t bytes, managed_advice advice, memory_location location) const;
};

}  // namespace cudapmr
