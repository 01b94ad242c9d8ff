// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file device_malloc_resource.hpp
/// Device memory from `cudaMalloc`: no pool, so the device loses no more than
/// what is allocated; the frugal upstream for a caching_resource.

#include "cudapmr/stream.hpp"
#include "cudapmr/stream_ordered_resource.hpp"

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

namespace cudapmr {

namespace detail {
class over_aligned_map;
}  // namespace detail

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
/// Stream capture: `cudaMalloc` cannot be captured, so an allocation on a
/// stream being captured becomes a graph allocation node (`cudaMallocAsync`
/// on that stream): memory the graph owns, at the same address at every
/// launch, freed by a free node where it is freed during the capture, or by
/// `cudaFreeAsync` on the freeing stream where it is freed after. It does not
/// count in `allocated_bytes()` (the driver's graph memory holds it). A block
/// of `cudaMalloc` freed on a captured stream is kept back until `release()`
/// or destruction, as a replay of the graph may still use the memory. Calls
/// for uncaptured streams run in relaxed capture mode, so they neither fail
/// nor invalidate a capture that another thread runs meanwhile.
///
/// Thread-safe. Equal only to itself (it keeps the bases of over-aligned
/// blocks and its counters), as std::pmr resources are by default.
class device_malloc_resource final : public stream_ordered_resource {
 public:
  /// \throws std::invalid_argument for a bad ordinal; cuda_error where no device exists.
  explicit device_malloc_resource(int device);
  /// Frees what frees on captured streams kept back, as `release()` does:
  /// destroy it only once no graph that used them will replay.
  ~device_malloc_resource() override;

  /// Bytes this resource holds from cudaMalloc and has not freed, alignment
  /// padding included but before CUDA's rounding to pages, and their most at
  /// once. Blocks held back by a free on a captured stream no longer count.
  [[nodiscard]] std::size_t allocated_bytes() const noexcept { return allocated_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::size_t allocated_bytes_high() const noexcept { return high_.load(std::memory_order_relaxed); }
  /// Frees, after synchronizing the device, the blocks whose frees came on a
  /// captured stream. Call it once no graph that used them will replay, and
  /// not while a stream of the device is being captured (the synchronize
  /// would break that capture). \throws cuda_error if the synchronize fails;
  /// the blocks then stay held back.
  void release();

  [[nodiscard]] std::string description() const override;

 private:
  [[nodiscard]] stream_ref do_bound_stream() const noexcept override { return bound_stream_.ref(); }
  void* do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) override;
  void do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept override;
  void do_report(resource_state& state) const override;
  void count_allocated(std::size_t bytes) noexcept;
  /// `bytes` (plus `padding` for `alignment`) from the driver's graph memory, on the captured `stream`.
  [[nodiscard]] void* allocate_in_graph(std::size_t bytes, std::size_t alignment, std::size_t padding, stream_ref stream);

  stream bound_stream_;
  std::atomic<std::size_t> allocated_{0};
  std::atomic<std::size_t> high_{0};
  std::unique_ptr<detail::over_aligned_map> over_aligned_;  // aligned pointer -> cudaMalloc's pointer
  std::mutex mutex_;  // guards held_back_ and graph_blocks_
  std::vector<void*> held_back_;  // cudaMalloc's pointers freed on captured streams
  std::unordered_set<void*> graph_blocks_;  // allocated during a capture: the graph's memory
};

}  // namespace cudapmr
