// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/device_stack.hpp"

#include "cudapmr/detail/cuda_check.hpp"
#include "cudapmr/detail/per_device.hpp"
#include "cudapmr/error.hpp"

#include <fmt/format.h>

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
  return detail::per_device_instance<device_stack>(device);
}

}  // namespace cudapmr
