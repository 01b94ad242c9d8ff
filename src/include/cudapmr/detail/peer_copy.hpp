// SPDX-License-Identifier: Apache-2.0
#pragma once
// Copies between the memory of two devices (src/peer_copy.cpp).

#include "cudapmr/pool_resource.hpp"
#include "cudapmr/stream.hpp"

#include <cstddef>

namespace cudapmr::detail {

/// How a copy between two devices' memory travels.
enum class device_copy_route {
  peer,    ///< one cudaMemcpyPeerAsync, device to device (NVLink or PCIe peer to peer)
  staged,  ///< device to pinned host memory to device, each half on a stream of the device that owns the memory
};

/// A staged copy goes through pinned host memory in chunks of this size, two
/// at a time (one leaving the source while the other enters the destination),
/// so that a copy of any size holds a bounded amount of pinned memory.
inline constexpr std::size_t peer_staging_chunk_bytes = std::size_t{16} << 20;

/// The pinned pool that staged copies between devices use, of the library's own.
[[nodiscard]] pool_stats peer_staging_stats();

/// `peer` where either device can reach the other's memory
/// (cudaDeviceCanAccessPeer), `staged` otherwise. \throws cuda_error.
[[nodiscard]] device_copy_route route_between_devices(int destination_device, int source_device);

/// The device `stream` belongs to (the current device for the null stream). \throws cuda_error.
[[nodiscard]] int stream_device(stream_ref stream);

/// Copies `bytes` from memory of `source_device` to memory of
/// `destination_device` along `route`, in stream order on `stream`: after the
/// work queued on `stream` so far, and before the work queued there later.
/// \throws cuda_error.
void copy_between_devices(void* destination, int destination_device, const void* source, int source_device,
                          std::size_t bytes, stream_ref stream, device_copy_route route);

/// Copies as above, by the route `route_between_devices` picks, when
/// `destination` and `source` are device memory of two different devices;
/// otherwise returns false, having done nothing. \throws cuda_error.
bool try_copy_between_devices(void* destination, const void* source, std::size_t bytes, stream_ref stream);

}  // namespace cudapmr::detail
