// SPDX-License-Identifier: Apache-2.0
#pragma once
// The process's one `Resource` per device, made on first use and never
// destroyed: a free during exit still finds it, and no destructor races
// CUDA's teardown. What it still holds when the process ends (a device_stack
// gives back what is idle at exit) the driver takes back.

#include "cudapmr/device.hpp"

#include <map>
#include <mutex>

namespace cudapmr::detail {

/// `Resource(device)` of `device`, the same object at every call. \throws
/// std::invalid_argument for a bad ordinal; what the constructor throws.
template <class Resource>
Resource& per_device_instance(int device) {
  validate_device_ordinal(device);
  static std::mutex mutex;
  static auto* const instances = new std::map<int, Resource*>();
  const std::lock_guard lock(mutex);
  Resource*& instance = (*instances)[device];
  if (instance == nullptr) instance = new Resource(device);
  return *instance;
}

}  // namespace cudapmr::detail
