// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/detail/synchronize.hpp"

#include "cudapmr/detail/driver_entry_point.hpp"
#include "cudapmr/detail/relaxed_capture_scope.hpp"
#include "cudapmr/device.hpp"
#include "cudapmr/error.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>

namespace cudapmr::detail {

bool has_active_context(int ordinal) noexcept {
  static const auto get_device = driver_function<PFN_cuDeviceGet_v2000>("cuDeviceGet");
  static const auto get_state = driver_function<PFN_cuDevicePrimaryCtxGetState_v7000>("cuDevicePrimaryCtxGetState");
  if (get_device == nullptr || get_state == nullptr) return true;
  CUdevice device{};
  unsigned int flags = 0;
  int active = 1;
  if (get_device(&device, ordinal) != CUDA_SUCCESS || get_state(device, &flags, &active) != CUDA_SUCCESS) return true;
  return active != 0;
}

void synchronize_devices(memory_kind kind, int device_id) {
  if (kind == memory_kind::pageable) return;
  const int first = device_id < 0 ? 0 : device_id;
  const int last = device_id < 0 ? device::count() - 1 : device_id;
  int current = 0;
  CUDAPMR_CHECK(cudaGetDevice(&current));
  // This thread's own capture mode is not what stops the wait. Where a stream
  // of the device is being captured, CUDA refuses it all the same
  // (cudaErrorStreamCaptureUnsupported, the capture invalidated): the caller
  // then keeps what it would have handed back.
  const relaxed_capture_scope relaxed;
  for (int ordinal = first; ordinal <= last; ++ordinal) {
    // The current device always: its context may be one made through the driver, not the primary one.
    if (device_id < 0 && ordinal != current && !has_active_context(ordinal)) continue;
    const scoped_device guard(ordinal);
    CUDAPMR_CHECK(cudaDeviceSynchronize());
  }
}

}  // namespace cudapmr::detail
