// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file device_malloc_resource.hpp
/// Device memory from `cudaMalloc`: no pool, so the device loses no more than
/// what is allocated; the frugal upstream for a caching_resource.

#include "cudapmr/stream.hpp"
#include "cudapmr/stream_ordered_resource.hpp"

#include <atomic>
#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

namespace cudapmr {

/// Device memory of one GPU, one `cudaMalloc` per allocation. A CUDA pool
/// reserves device memory in chunks of 32 MiB or more, so a program that
/// keeps a few MiB live through a pool costs the device the chunks; `cudaMalloc`
/// rounds to the 2 MiB page and packs small allocations into pages.
///
/// Each call is synchronous and slow (microseconds; `cudaFree` waits for the
/// whole device), so use it under a caching_resource, which calls it only on
/// a miss and when it gives memory back. `deallocate_async` waits for the
/// stream before freeing, which keeps the stream-ordered contract.
///
/// Stream capture: allocating on a stream being captured throws cuda_error
/// (`cudaErrorStreamCaptureUnsupported`), as no graph node can stand for
/// `cudaMalloc`; a free on a captured stream is kept back until `release()`
/// or destruction, as a replay of the graph may still use the memory.
///
/// Thread-safe. Two such resources of the same device compare equal: either
/// may free what the other allocated.
class device_malloc_resource final : public stream_ordered_resource {
 public:
  /// \throws std::invalid_argument for a bad ordinal; cuda_error where no device exists.
  explicit device_malloc_resource(int device);
  /// Synchronizes the device, then frees what frees on captured streams kept back.
  ~device_malloc_resource() override;

  /// Bytes this resource has handed out and not yet freed (as requested, before
  /// CUDA's rounding), and their most at once.
  [[nodiscard]] std::size_t allocated_bytes() const noexcept { return allocated_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::size_t allocated_bytes_high() const noexcept { return high_.load(std::memory_order_relaxed); }
  /// Frees, after synchronizing the device, the blocks whose frees came on a
  /// captured stream. Call it once no graph that used them will replay.
  /// \throws cuda_error if the synchronize fails.
  void release();

  [[nodiscard]] std::string description() const override;

 private:
  [[nodiscard]] stream_ref do_bound_stream() const noexcept override { return bound_stream_.ref(); }
  void* do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) override;
  void do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept override;
  [[nodiscard]] bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override;

  void count_allocated(std::size_t bytes) noexcept;

  stream bound_stream_;
  std::atomic<std::size_t> allocated_{0};
  std::atomic<std::size_t> high_{0};
  std::mutex held_back_mutex_;
  std::vector<void*> held_back_;  // allocation bases freed on captured streams
};

}  // namespace cudapmr
