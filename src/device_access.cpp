// SPDX-License-Identifier: Apache-2.0
// Peer access to device pools: which other devices may touch a pool's memory.
#include "cudapmr/device_memory_resource.hpp"

#include "cudapmr/detail/cuda_check.hpp"
#include "cudapmr/device.hpp"
#include "cudapmr/error.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace cudapmr {
namespace {

cudaMemLocation location_of_device(int device) { return {cudaMemLocationTypeDevice, device}; }

void set_access(const device_memory_resource& resource, int device, cudaMemAccessFlags flags) {
  const cudaMemAccessDesc access{location_of_device(device), flags};
  detail::check_cuda(cudaMemPoolSetAccess(resource.pool(), &access, 1), [&] {
    return fmt::format("cudaMemPoolSetAccess of {} for device {} (flags {})", resource.description(), device,
                       static_cast<int>(flags));
  });
}

}  // namespace

void device_memory_resource::enable_access_from(int device) {
  detail::validate_device_ordinal(device);
  if (device == device_id()) return;  // the owner's access is implicit and permanent
  int reachable = 0;
  CUDAPMR_CHECK(cudaDeviceCanAccessPeer(&reachable, device, device_id()));
  if (reachable == 0)
    throw cuda_error(cudaErrorPeerAccessUnsupported,
                     fmt::format("enable_access_from({}) on {}: device {} cannot reach the memory of device {} (no "
                                 "peer path between them; copies between them are staged through host memory)",
                                 device, description(), device, device_id()));
  set_access(*this, device, cudaMemAccessFlagsProtReadWrite);
}

void device_memory_resource::disable_access_from(int device) {
  detail::validate_device_ordinal(device);
  if (device == device_id())
    throw std::invalid_argument(fmt::format(
        "disable_access_from({}) on {}: a device's access to its own pool cannot be withdrawn", device, description()));
  set_access(*this, device, cudaMemAccessFlagsProtNone);
}

bool device_memory_resource::is_accessible_from(int device) const {
  detail::validate_device_ordinal(device);
  if (device == device_id()) return true;
  cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
  cudaMemLocation location = location_of_device(device);
  detail::check_cuda(cudaMemPoolGetAccess(&flags, pool(), &location), [&] {
    return fmt::format("cudaMemPoolGetAccess of {} for device {}", description(), device);
  });
  return flags == cudaMemAccessFlagsProtReadWrite;
}

}  // namespace cudapmr
