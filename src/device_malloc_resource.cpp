// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/device_malloc_resource.hpp"

#include "cudapmr/detail/cuda_check.hpp"
#include "cudapmr/detail/over_aligned_map.hpp"
#include "cudapmr/detail/relaxed_capture_scope.hpp"
#include "cudapmr/detail/stream_ordering.hpp"
#include "cudapmr/device.hpp"
#include "cudapmr/error.hpp"

#include <fmt/format.h>

#include <limits>

namespace cudapmr {
namespace {

/// What `cudaMalloc` guarantees for every pointer.
constexpr std::size_t malloc_alignment = 256;

/// What an allocation aligned to `alignment` asks of cudaMalloc beyond its bytes.
constexpr std::size_t padding_for(std::size_t alignment) noexcept {
  return alignment > malloc_alignment ? alignment - malloc_alignment : 0;
}

int validated(int device) {
  detail::validate_device_ordinal(device);
  return device;
}

}  // namespace

device_malloc_resource::device_malloc_resource(int device)
    : stream_ordered_resource(memory_kind::device, validated(device)),
      bound_stream_(device),
      over_aligned_(std::make_unique<detail::over_aligned_map>()) {}

device_malloc_resource::~device_malloc_resource() {
  try {
    release();
  } catch (...) {  // a destructor never throws; at worst the held-back blocks stay allocated
  }
}

void device_malloc_resource::release() {
  const detail::scoped_device on_device(device_id());
  std::vector<void*> blocks;
  {
    const std::lock_guard lock(mutex_);
    blocks.swap(held_back_);
  }
  if (blocks.empty()) return;
  if (const cudaError_t status = cudaDeviceSynchronize(); status != cudaSuccess) {
    const std::lock_guard lock(mutex_);
    held_back_.insert(held_back_.end(), blocks.begin(), blocks.end());
    detail::check_cuda(status, [&] {
      return fmt::format("cudaDeviceSynchronize before {} frees {} held-back blocks", description(), blocks.size());
    });
  }
  const detail::relaxed_capture_scope relaxed;
  for (void* base : blocks) CUDAPMR_ASSERT_CUDA_SUCCESS(cudaFree(base));
}

std::string device_malloc_resource::description() const {
  return fmt::format("device_malloc_resource (device {})", device_id());
}

void device_malloc_resource::count_allocated(std::size_t bytes) noexcept {
  const std::size_t now = allocated_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::size_t high = high_.load(std::memory_order_relaxed);
  while (now > high && !high_.compare_exchange_weak(high, now, std::memory_order_relaxed)) {
  }
}

void device_malloc_resource::do_report(resource_state& state) const {
  state.reserved_bytes = allocated_bytes();
  state.peak_reserved_bytes = allocated_bytes_high();
}

void* device_malloc_resource::do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) {
  if (bytes == 0) return nullptr;  // whatever the alignment: zero bytes are never backed
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  detail::check_cuda(cudaStreamIsCapturing(stream.get(), &capture), [&] {
    return fmt::format("cudaStreamIsCapturing on stream {} before {} bytes from {}", fmt::ptr(stream.get()), bytes,
                       description());
  });
  const std::size_t padding = padding_for(alignment);
  if (bytes > std::numeric_limits<std::size_t>::max() - padding)
    throw out_of_memory(bytes, alignment, description(), "the request plus alignment padding overflows size_t");
  if (capture != cudaStreamCaptureStatusNone) return allocate_in_graph(bytes, alignment, padding, stream);
  const detail::scoped_device on_device(device_id());
  const detail::relaxed_capture_scope relaxed;
  void* base = nullptr;
  detail::check_cuda_allocation(cudaMalloc(&base, bytes + padding), bytes, alignment, [&] { return description(); },
                                [&] { return fmt::format("cudaMalloc of {} bytes for {}", bytes + padding, description()); });
  if (padding == 0) {
    count_allocated(bytes);
    return base;
  }
  void* aligned = detail::align_up(base, alignment);
  try {
    over_aligned_->insert(aligned, base);
  } catch (...) {
    CUDAPMR_ASSERT_CUDA_SUCCESS(cudaFree(base));
    throw;
  }
  count_allocated(bytes + padding);
  return aligned;
}

void* device_malloc_resource::allocate_in_graph(std::size_t bytes, std::size_t alignment, std::size_t padding,
                                                stream_ref stream) {
  // No graph node stands for cudaMalloc; an allocation node does, from the driver's graph memory.
  void* base = nullptr;
  detail::check_cuda_allocation(
      cudaMallocAsync(&base, bytes + padding, stream.get()), bytes, alignment, [&] { return description(); }, [&] {
        return fmt::format("cudaMallocAsync of {} bytes on captured stream {} for {}", bytes + padding,
                           fmt::ptr(stream.get()), description());
      });
  void* aligned = padding != 0 ? detail::align_up(base, alignment) : base;
  try {
    const std::lock_guard lock(mutex_);
    graph_blocks_.insert(base);
    if (padding != 0) over_aligned_->insert(aligned, base);
  } catch (...) {
    {
      const std::lock_guard lock(mutex_);
      graph_blocks_.erase(base);
    }
    CUDAPMR_ASSERT_CUDA_SUCCESS(cudaFreeAsync(base, stream.get()));
    throw;
  }
  return aligned;
}

void device_malloc_resource::do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment,
                                                 stream_ref stream) noexcept {
  const std::size_t padding = padding_for(alignment);
  void* base = padding != 0 ? over_aligned_->take(p) : p;
  bool of_graph = false;
  {
    const std::lock_guard lock(mutex_);
    of_graph = graph_blocks_.erase(base) != 0;
  }
  if (of_graph) {
    // A free node where the stream is captured; else freed in the stream's order.
    CUDAPMR_ASSERT_CUDA_SUCCESS(cudaFreeAsync(base, stream.get()));
    return;
  }
  allocated_.fetch_sub(bytes + padding, std::memory_order_relaxed);
  // Captured, or unknown (a legacy stream while another is captured): a replay
  // of the graph may still use the block, so it waits for release().
  if (detail::cuda_stream_ordering().is_capturing(stream)) {
    try {
      const std::lock_guard lock(mutex_);
      held_back_.push_back(base);
    } catch (...) {  // no memory to remember it: the block leaks rather than being freed under a graph
    }
    return;
  }
  const detail::relaxed_capture_scope relaxed;
  // Work queued on `stream` before the free may still use the block.
  CUDAPMR_ASSERT_CUDA_SUCCESS(cudaStreamSynchronize(stream.get()));
  CUDAPMR_ASSERT_CUDA_SUCCESS(cudaFree(base));
}

}  // namespace cudapmr
