// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/current_resource.hpp"

#include "cudapmr/detail/device_resource_registry.hpp"
#include "cudapmr/device.hpp"
#include "cudapmr/device_memory_resource.hpp"

namespace cudapmr {
namespace detail {

stream_ordered_resource*& device_resource_registry::slot(int device) {
  stream_ordered_resource*& resource = resources_[device];
  if (resource == nullptr) {
    try {
      resource = &fallback_(device);
    } catch (...) {
      resources_.erase(device);  // a bad ordinal leaves no empty entry behind
      throw;
    }
  }
  return resource;
}

stream_ordered_resource& device_resource_registry::get(int device) {
  const std::lock_guard lock(mutex_);
  return *slot(device);
}

stream_ordered_resource& device_resource_registry::set(int device, stream_ordered_resource& resource) {
  const std::lock_guard lock(mutex_);
  stream_ordered_resource*& current = slot(device);
  stream_ordered_resource& previous = *current;
  current = &resource;
  return previous;
}

}  // namespace detail
namespace {

stream_ordered_resource& default_for(int device) { return default_device_resource(device); }

detail::device_resource_registry& registry() {
  // Never destroyed: resources may be looked up from other static destructors.
  static auto* instance = new detail::device_resource_registry(default_for);
  return *instance;
}

}  // namespace

stream_ordered_resource& current_device_resource() { return registry().get(device::current().ordinal()); }

stream_ordered_resource& current_device_resource(int device) { return registry().get(device); }

stream_ordered_resource& set_current_device_resource(stream_ordered_resource& resource) {
  return registry().set(device::current().ordinal(), resource);
}

stream_ordered_resource& set_current_device_resource(int device, stream_ordered_resource& resource) {
  return registry().set(device, resource);
}

}  // namespace cudapmr
