// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/device_malloc_resource.hpp"

#include "cudapmr/detail/cuda_check.hpp"
#include "cudapmr/detail/driver_entry_point.hpp"
#include "cudapmr/device.hpp"
#include "cudapmr/error.hpp"

#include <cuda.h>
#include <fmt/format.h>

#include <cstdint>
#include <limits>

namespace cudapmr {
namespace {

/// What `cudaMalloc` guarantees for every pointer.
constexpr std::size_t malloc_alignment = 256;

int validated(int device) {
  detail::validate_device_ordinal(device);
  return device;
}

/// The pointer `cudaMalloc` gave for the allocation that holds `p`; `p` where
/// the driver cannot tell (then the free reports the error).
void* allocation_base(void* p) noexcept {
  using pointer_attribute_function = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);
  static const auto attribute = detail::driver_function<pointer_attribute_function>("cuPointerGetAttribute");
  CUdeviceptr base = 0;
  if (attribute == nullptr ||
      attribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS)
    return p;
  return reinterpret_cast<void*>(base);
}

bool is_capturing(stream_ref stream) noexcept {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  // Unknown counts as captured: the memory is then kept, never freed too early.
  if (!detail::recover_from(cudaStreamIsCapturing(stream.get(), &status))) return true;
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace

device_malloc_resource::device_malloc_resource(int device)
    : stream_ordered_resource(memory_kind::device, validated(device)), bound_stream_(device) {}

device_malloc_resource::~device_malloc_resource() {
  try {
    release();
  } catch (...) {  // a destructor never throws; at worst the held-back blocks stay allocated
  }
}

void device_malloc_resource::release() {
  std::vector<void*> blocks;
  {
    const std::lock_guard lock(held_back_mutex_);
    blocks.swap(held_back_);
  }
  if (blocks.empty()) return;
  const detail::scoped_device on_device(device_id());
  if (const cudaError_t status = cudaDeviceSynchronize(); status != cudaSuccess) {
    const std::lock_guard lock(held_back_mutex_);
    held_back_.insert(held_back_.end(), blocks.begin(), blocks.end());
    detail::check_cuda(status, [&] { return fmt::format("cudaDeviceSynchronize before {} frees", description()); });
  }
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

void* device_malloc_resource::do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) {
  if (bytes == 0) return nullptr;  // whatever the alignment: zero bytes are never backed
  if (is_capturing(stream))
    throw cuda_error(cudaErrorStreamCaptureUnsupported,
                     fmt::format("{} bytes from {} on stream {}: the stream is being captured into a graph, and no "
                                 "graph node can stand for cudaMalloc (allocate before the capture, or from a pool)",
                                 bytes, description(), fmt::ptr(stream.get())));
  const std::size_t padding = alignment > malloc_alignment ? alignment - malloc_alignment : 0;
  if (bytes > std::numeric_limits<std::size_t>::max() - padding)
    throw out_of_memory(bytes, alignment, description(), "the request plus alignment padding overflows size_t");
  const detail::scoped_device on_device(device_id());
  void* base = nullptr;
  detail::check_cuda_allocation(cudaMalloc(&base, bytes + padding), bytes, alignment, [&] { return description(); },
                                [&] { return fmt::format("cudaMalloc of {} bytes for {}", bytes + padding, description()); });
  count_allocated(bytes);
  const auto address = reinterpret_cast<std::uintptr_t>(base);
  return reinterpret_cast<void*>((address + alignment - 1) & ~(std::uintptr_t{alignment} - 1));
}

void device_malloc_resource::do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment,
                                                 stream_ref stream) noexcept {
  void* base = alignment > malloc_alignment ? allocation_base(p) : p;
  allocated_.fetch_sub(bytes, std::memory_order_relaxed);
  if (is_capturing(stream)) {
    try {
      const std::lock_guard lock(held_back_mutex_);
      held_back_.push_back(base);
      return;
    } catch (...) {  // no memory to remember it: the block leaks rather than being freed under a graph
      return;
    }
  }
  // Work queued on `stream` before the free may still use the block.
  CUDAPMR_ASSERT_CUDA_SUCCESS(cudaStreamSynchronize(stream.get()));
  CUDAPMR_ASSERT_CUDA_SUCCESS(cudaFree(base));
}

bool device_malloc_resource::do_is_equal(const std::pmr::memory_resource& other) const noexcept {
  const auto* malloc_resource = dynamic_cast<const device_malloc_resource*>(&other);
  return malloc_resource != nullptr && malloc_resource->device_id() == device_id();
}

}  // namespace cudapmr
