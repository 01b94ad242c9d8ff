// SPDX-License-Identifier: Apache-2.0
// Copies between two devices' memory: peer to peer where the devices reach
// each other, through pinned host memory otherwise.
#include "cudapmr/detail/peer_copy.hpp"

#include "cudapmr/detail/cuda_check.hpp"
#include "cudapmr/device.hpp"
#include "cudapmr/error.hpp"
#include "cudapmr/pinned_memory_resource.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <mutex>

namespace cudapmr::detail {
namespace {

/// The device whose device memory `p` is, or -1 for any other memory.
int owning_device(const void* p) noexcept {
  cudaPointerAttributes attributes{};
  if (!recover_from(cudaPointerGetAttributes(&attributes, p))) return -1;
  return attributes.type == cudaMemoryTypeDevice ? attributes.device : -1;
}

/// One stream per device for the halves of staged copies, made on first use.
stream_ref copy_stream(int device) {
  static std::mutex mutex;
  static auto* streams = new std::map<int, stream>();  // never destroyed: copies may run until exit
  const std::lock_guard lock(mutex);
  auto found = streams->find(device);
  if (found == streams->end()) found = streams->emplace(device, stream(device)).first;
  return found->second.ref();
}

/// Pinned memory that every device reaches, for staged copies: a pool of its
/// own, so that its use can be told apart.
pinned_memory_resource& staging_memory() {
  static auto* resource = new pinned_memory_resource(pinned_pool_options{});  // never destroyed, like the copy streams
  return *resource;
}

/// Makes `waiter` wait for the work queued on `signaller`, a stream of `signaller_device`, so far.
void order_after(stream_ref waiter, stream_ref signaller, int signaller_device) {
  const scoped_device guard(signaller_device);  // an event is recorded on a stream of its own device
  cudaEvent_t event = nullptr;
  CUDAPMR_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  cudaError_t status = cudaEventRecord(event, signaller.get());
  if (status == cudaSuccess) status = cudaStreamWaitEvent(waiter.get(), event, 0);
  CUDAPMR_ASSERT_CUDA_SUCCESS(cudaEventDestroy(event));  // CUDA frees it once it has completed
  check_cuda(status, [&] {
    return fmt::format("ordering stream {} after stream {} of device {}", fmt::ptr(waiter.get()),
                       fmt::ptr(signaller.get()), signaller_device);
  });
}

void copy_on_stream(void* destination, const void* source, std::size_t bytes, cudaMemcpyKind kind, stream_ref stream) {
  check_cuda(cudaMemcpyAsync(destination, source, bytes, kind, stream.get()), [&] {
    return fmt::format("cudaMemcpyAsync of {} bytes from {} to {} on stream {} (staged copy between devices)", bytes,
                       fmt::ptr(source), fmt::ptr(destination), fmt::ptr(stream.get()));
  });
}

void staged_copy(void* destination, int destination_device, const void* source, int source_device, std::size_t bytes,
                 stream_ref stream) {
  const int caller_device = stream_device(stream);
  const stream_ref out_of_source = copy_stream(source_device);
  const stream_ref into_destination = copy_stream(destination_device);
  pinned_memory_resource& staging = staging_memory();
  // Two bounce chunks: one fills from the source while the other drains into the destination.
  const std::size_t chunk = std::min(bytes, peer_staging_chunk_bytes);
  const std::size_t bounces = bytes > chunk ? 2 : 1;
  std::array<void*, 2> bounce{};
  for (std::size_t i = 0; i < bounces; ++i) {
    try {
      bounce[i] = staging.allocate_async(chunk, stream);
    } catch (...) {
      if (i == 1) staging.deallocate_async(bounce[0], chunk, stream);
      throw;
    }
  }
  try {
    order_after(out_of_source, stream, caller_device);
    const auto* from = static_cast<const unsigned char*>(source);
    auto* to = static_cast<unsigned char*>(destination);
    for (std::size_t offset = 0, index = 0; offset < bytes; offset += chunk, ++index) {
      const std::size_t piece = std::min(chunk, bytes - offset);
      void* through = bounce[index % bounces];
      // The chunk's previous contents must have reached the destination first.
      if (index >= bounces) order_after(out_of_source, into_destination, destination_device);
      copy_on_stream(through, from + offset, piece, cudaMemcpyDeviceToHost, out_of_source);
      order_after(into_destination, out_of_source, source_device);
      copy_on_stream(to + offset, through, piece, cudaMemcpyHostToDevice, into_destination);
    }
    order_after(stream, into_destination, destination_device);
  } catch (...) {
    // Halves already queued must finish before the bounce memory is freed.
    static_cast<void>(recover_from(cudaStreamSynchronize(out_of_source.get())));
    static_cast<void>(recover_from(cudaStreamSynchronize(into_destination.get())));
    for (std::size_t i = 0; i < bounces; ++i) staging.deallocate_async(bounce[i], chunk, stream);
    throw;
  }
  for (std::size_t i = 0; i < bounces; ++i) staging.deallocate_async(bounce[i], chunk, stream);
}

}  // namespace

pool_stats peer_staging_stats() { return staging_memory().stats(); }

device_copy_route route_between_devices(int destination_device, int source_device) {
  if (destination_device == source_device) return device_copy_route::peer;  // a device reaches its own memory
  int forward = 0;
  int backward = 0;
  CUDAPMR_CHECK(cudaDeviceCanAccessPeer(&forward, destination_device, source_device));
  CUDAPMR_CHECK(cudaDeviceCanAccessPeer(&backward, source_device, destination_device));
  return forward != 0 || backward != 0 ? device_copy_route::peer : device_copy_route::staged;
}

int stream_device(stream_ref stream) {
  int device = 0;
  CUDAPMR_CHECK(cudaStreamGetDevice(stream.get(), &device));
  return device;
}

void copy_between_devices(void* destination, int destination_device, const void* source, int source_device,
                          std::size_t bytes, stream_ref stream, device_copy_route route) {
  if (bytes == 0) return;
  if (route == device_copy_route::staged) {
    staged_copy(destination, destination_device, source, source_device, bytes, stream);
    return;
  }
  check_cuda(cudaMemcpyPeerAsync(destination, destination_device, source, source_device, bytes, stream.get()), [&] {
    return fmt::format("cudaMemcpyPeerAsync of {} bytes from {} (device {}) to {} (device {}) on stream {}", bytes,
                       fmt::ptr(source), source_device, fmt::ptr(destination), destination_device,
                       fmt::ptr(stream.get()));
  });
}

bool try_copy_between_devices(void* destination, const void* source, std::size_t bytes, stream_ref stream) {
  const int source_device = owning_device(source);
  if (source_device < 0) return false;
  const int destination_device = owning_device(destination);
  if (destination_device < 0 || destination_device == source_device) return false;
  copy_between_devices(destination, destination_device, source, source_device, bytes, stream,
                       route_between_devices(destination_device, source_device));
  return true;
}

}  // namespace cudapmr::detail
