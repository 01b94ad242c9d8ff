// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file current_resource.hpp
/// The per-device resource that code draws from when no resource is named.

#include "cudapmr/stream_ordered_resource.hpp"

namespace cudapmr {

/// The resource registered for the calling thread's current device; until one
/// is set, `default_device_resource(device)`. Thread-safe.
/// \throws cuda_error where no device exists.
[[nodiscard]] stream_ordered_resource& current_device_resource();
/// The resource registered for `device`; until one is set, `default_device_resource(device)`.
/// \throws std::invalid_argument for an ordinal out of range; cuda_error where no device exists.
[[nodiscard]] stream_ordered_resource& current_device_resource(int device);

/// Registers `resource` for the current device and returns the one it
/// replaces. The registry only refers to `resource`: it must stay alive until
/// replaced. Thread-safe. \throws as `current_device_resource()`.
stream_ordered_resource& set_current_device_resource(stream_ordered_resource& resource);
/// Registers `resource` for `device` and returns the one it replaces.
/// \throws as `current_device_resource(int)`.
stream_ordered_resource& set_current_device_resource(int device, stream_ordered_resource& resource);

/// Registers a resource for one device for the lifetime of this object, then
/// puts the previous one back.
class scoped_current_device_resource {
 public:
  /// \throws as `set_current_device_resource(int, stream_ordered_resource&)`.
  scoped_current_device_resource(int device, stream_ordered_resource& resource)
      : device_(device), previous_(&set_current_device_resource(device, resource)) {}
  ~scoped_current_device_resource() {
    try {
      static_cast<void>(set_current_device_resource(device_, *previous_));
    } catch (...) {
      // Cannot fail: the device's entry exists since construction.
    }
  }
  scoped_current_device_resource(const scoped_current_device_resource&) = delete;
  scoped_current_device_resource& operator=(const scoped_current_device_resource&) = delete;

 private:
  int device_;
  stream_ordered_resource* previous_;
};

}  // namespace cudapmr
