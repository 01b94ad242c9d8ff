// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/device_stack.hpp"

#include "cudapmr/detail/cuda_check.hpp"
#include "cudapmr/device.hpp"
#include "cudapmr/error.hpp"

#include <fmt/format.h>

#include <map>
#include <mutex>

namespace cudapmr {

device_stack::device_stack(int device, device_stack_options options)
    : stream_ordered_resource(memory_kind::device, device),
      leaf_(device, options.leaf),
      engine_(leaf_, options.engine),
      front_(engine_, options.front) {}

void device_stack::release() {
  front_.release();
  engine_.release();
  leaf_.release();
}

std::string device_stack::description() const { return fmt::format("device_stack (device {})", device_id()); }

device_stack& default_device_stack(int device) {
  if (device < 0) CUDAPMR_CHECK(cudaGetDevice(&device));
  detail::validate_device_ordinal(device);
  // Never destroyed, as default_device_resource's pools: a free during exit
  // still finds it; the driver takes back what is mapped at the end.
  static std::mutex mutex;
  static auto* stacks = new std::map<int, device_stack*>();
  const std::lock_guard lock(mutex);
  auto& stack = (*stacks)[device];
  if (stack == nullptr) stack = new device_stack(device);
  return *stack;
}

}  // namespace cudapmr
