// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/detail/synchronize.hpp"

#include "cudapmr/detail/driver_entry_point.hpp"
#include "cudapmr/device.hpp"
#include "cudapmr/error.hpp"

#include <cuda.h>

namespace cudapmr::detail {
namespace {

using device_get_function = CUresult (*)(CUdevice*, int);
using primary_context_state_function = CUresult (*)(CUdevice, unsigned int*, int*);

/// Whether the process has a context on `ordinal` that work could be queued
/// in: its primary context is active (unknown counts as active). Selecting a
/// device whose context is not would create one, and nothing waits there.
bool has_active_context(int ordinal) noexcept {
  static const auto get_device = driver_function<device_get_function>("cuDeviceGet");
  static const auto get_state = driver_function<primary_context_state_function>("cuDevicePrimaryCtxGetState");
  if (get_device == nullptr || get_state == nullptr) return true;
  CUdevice device{};
  unsigned int flags = 0;
  int active = 1;
  if (get_device(&device, ordinal) != CUDA_SUCCESS || get_state(device, &flags, &active) != CUDA_SUCCESS) return true;
  return active != 0;
}

}  // namespace

void synchronize_devices(memory_kind kind, int device_id) {
  if (kind == memory_kind::pageable) return;
  const int first = device_id < 0 ? 0 : device_id;
  const int last = device_id < 0 ? device::count() - 1 : device_id;
  for (int ordinal = first; ordinal <= last; ++ordinal) {
    if (device_id < 0 && !has_active_context(ordinal)) continue;
    const scoped_device guard(ordinal);
    CUDAPMR_CHECK(cudaDeviceSynchronize());
  }
}

}  // namespace cudapmr::detail
