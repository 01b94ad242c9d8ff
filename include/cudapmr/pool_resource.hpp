// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file pool_resource.hpp
/// The one implementation behind the three CUDA memory kinds: a resource that
/// draws from a CUDA memory pool with `cudaMallocFromPoolAsync`.

#include "cudapmr/stream_ordered_resource.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <limits>
#include <memory>
#include <optional>
#include <string>

namespace cudapmr {

/// A release threshold that keeps all freed memory in the pool.
inline constexpr std::size_t keep_all_memory = std::numeric_limits<std::size_t>::max();

/// A snapshot of a pool's counters, in bytes. "Reserved" is memory the pool
/// holds from the system; "used" is memory handed out and not yet freed.
struct pool_stats {
  std::size_t reserved_current = 0;
  std::size_t reserved_high = 0;
  std::size_t used_current = 0;
  std::size_t used_high = 0;
};

namespace detail {
/// Owns a `cudaMemPool_t` when `owned`; a driver default pool is only borrowed.
class pool_handle {
 public:
  pool_handle(cudaMemPool_t pool, bool owned) noexcept : pool_(pool), owned_(owned) {}
  ~pool_handle();
  pool_handle(pool_handle&& other) noexcept;
  pool_handle& operator=(pool_handle&&) = delete;
  pool_handle(const pool_handle&) = delete;
  pool_handle& operator=(const pool_handle&) = delete;

  [[nodiscard]] cudaMemPool_t get() const noexcept { return pool_; }
  [[nodiscard]] bool owned() const noexcept { return owned_; }

 private:
  cudaMemPool_t pool_;
  bool owned_;
};
}  // namespace detail

namespace detail {
/// A pool of host memory, the NUMA node its pages are on (empty where the
/// kernel chooses), why it is not where it was asked to be (empty when it is),
/// and the device whose stream the resource binds.
struct placed_host_pool {
  pool_handle pool;
  std::optional<int> numa_node;
  std::string note;
  int stream_device = 0;
};

/// Over-aligned allocations of one pool: each aligned pointer and the pointer
/// the pool gave. Shared by every resource over the pool, as they are equal.
class over_aligned_map;
}  // namespace detail

/// A stream-ordered resource over one CUDA memory pool: a leaf, with no cache
/// of its own. Thread-safe. Two pool resources compare equal when they draw
/// from the same pool.
///
/// Every allocation and free is a CUDA call: pmr `allocate` is
/// `cudaMallocFromPoolAsync` on the bound stream and its synchronize. For the
/// synchronous pmr path that std::pmr containers use, stack a
/// `caching_resource` on top (`default_pinned_resource()` and
/// `default_managed_resource()` are such stacks).
class pool_resource : public stream_ordered_resource {
 public:
  /// Waits for the bound stream, then destroys an owned pool (CUDA defers the
  /// release of memory still allocated from it until that memory is freed).
  ~pool_resource() override;

  /// The CUDA pool this resource draws from.
  [[nodiscard]] cudaMemPool_t pool() const noexcept { return pool_.get(); }
  /// True for a pool this resource created; false for a driver default pool.
  [[nodiscard]] bool owns_pool() const noexcept { return pool_.owned(); }

  /// The pool's counters. \throws cuda_error.
  [[nodiscard]] pool_stats stats() const;
  /// Resets `reserved_high` and `used_high` to the current values. \throws cuda_error.
  void reset_peaks();
  /// Waits for the bound stream (frees queued there must land), then releases
  /// unused pool memory to the system until at most `bytes_to_keep` bytes stay
  /// reserved; a pool that keeps its pages (`gives_memory_back()` false)
  /// releases nothing. Blocks a cache above holds are in use here: `release()`
  /// it first. \throws cuda_error.
  void trim_to(std::size_t bytes_to_keep);
  /// Reserved memory above this is released at the next synchronization.
  [[nodiscard]] std::size_t release_threshold() const;
  /// \throws std::invalid_argument for anything but `keep_all_memory` on a
  ///   pool that keeps its pages; cuda_error.
  void set_release_threshold(std::size_t bytes);
  /// False for a managed pool with no preferred location (the driver's
  /// default managed pool among them), which keeps every page it took: trims
  /// release nothing and the release threshold stays `keep_all_memory`. With
  /// driver 580.159 on an H100, memory such a pool handed out again after it
  /// released pages read as zeros on the host, and a prefetch to the host
  /// lost what the device wrote. Code outside cudapmr may still trim the
  /// process's default managed pool.
  [[nodiscard]] bool gives_memory_back() const noexcept {
    return kind() != memory_kind::managed || device_id() >= 0;  // a managed pool's device is the one it prefers
  }

  [[nodiscard]] std::string description() const final;

  /// Why the pool is not where it was asked to be (a host NUMA node CUDA
  /// refused, a device whose nearest node is unknown); empty when it is.
  [[nodiscard]] const std::string& placement_note() const noexcept { return placement_note_; }

 protected:
  /// \param kind the memory the pool holds.
  /// \param device_id the device the pool belongs to (or prefers).
  /// \param pool the CUDA pool, owned or not.
  /// \param name the concrete class, for messages.
  /// \param stream_device the device the bound stream is created on.
  pool_resource(memory_kind kind, int device_id, detail::pool_handle pool, const char* name, int stream_device);
  /// A pool of host memory, with where it is.
  pool_resource(memory_kind kind, detail::placed_host_pool pool, const char* name);

  [[nodiscard]] std::optional<int> host_numa_node() const noexcept { return host_numa_node_; }

  /// Sets the release threshold, then reserves `initial_size` bytes by
  /// allocating and freeing them on the bound stream.
  void configure(std::size_t initial_size, std::size_t release_threshold);

 private:
  [[nodiscard]] stream_ref do_bound_stream() const noexcept final { return bound_stream_.ref(); }
  void* do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) final;
  void do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept final;
  [[nodiscard]] bool do_is_equal(const std::pmr::memory_resource& other) const noexcept final;
  /// Waits for `stream` and the bound stream, then releases all unused pool memory.
  void do_trim(stream_ref stream) final;
  void do_report(resource_state& state) const final;

  [[nodiscard]] void* allocate_from_pool(std::size_t bytes, std::size_t alignment, stream_ref stream,
                                         std::size_t padding = 0);

  detail::pool_handle pool_;
  const char* name_;
  stream bound_stream_;
  /// Allocations aligned past what the pool guarantees are over-allocated;
  /// this maps each aligned pointer back to the pointer the pool gave.
  std::shared_ptr<detail::over_aligned_map> over_aligned_;
  std::optional<int> host_numa_node_;
  std::string placement_note_;
};

}  // namespace cudapmr
