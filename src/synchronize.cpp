// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/detail/synchronize.hpp"

#include "cudapmr/device.hpp"
#include "cudapmr/error.hpp"

namespace cudapmr::detail {

void synchronize_devices(memory_kind kind, int device_id) {
  if (kind == memory_kind::pageable) return;
  const int first = device_id < 0 ? 0 : device_id;
  const int last = device_id < 0 ? device::count() - 1 : device_id;
  for (int ordinal = first; ordinal <= last; ++ordinal) {
    const scoped_device guard(ordinal);
    CUDAPMR_CHECK(cudaDeviceSynchronize());
  }
}

}  // namespace cudapmr::detail
