// SPDX-License-Identifier: Apache-2.0
#pragma once
// The registry behind current_device_resource(), separate so that tests can
// run its logic with a fallback of their own.

#include "cudapmr/stream_ordered_resource.hpp"

#include <mutex>
#include <unordered_map>

namespace cudapmr::detail {

/// A locked map from device to resource, asking `fallback` for a device's
/// resource until one is set. Thread-safe.
class device_resource_registry {
 public:
  using fallback_function = stream_ordered_resource& (*)(int device);
  explicit device_resource_registry(fallback_function fallback) noexcept : fallback_(fallback) {}

  /// The resource of `device`. \throws what the fallback throws (a bad ordinal).
  [[nodiscard]] stream_ordered_resource& get(int device);
  /// Registers `resource` for `device`; returns the one it replaces. \throws as `get`.
  stream_ordered_resource& set(int device, stream_ordered_resource& resource);

 private:
  /// Called with the lock held.
  [[nodiscard]] stream_ordered_resource*& slot(int device);

  fallback_function fallback_;
  std::mutex mutex_;
  std::unordered_map<int, stream_ordered_resource*> resources_;
};

}  // namespace cudapmr::detail
