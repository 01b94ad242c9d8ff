// SPDX-License-Identifier: Apache-2.0
// Copies between pageable host memory and device-side memory through pinned
// staging blocks: the host copy of one chunk (split over the thread pool)
// overlaps the DMA of the previous ones.
#include "cudapmr/detail/staged_copy.hpp"

#include "cudapmr/detail/cuda_check.hpp"

#include "cudapmr/detail/block_cache.hpp"
#include "cudapmr/detail/host_thread_pool.hpp"
#include "cudapmr/detail/peer_copy.hpp"
#include "cudapmr/detail/pointer_type.hpp"
#include "cudapmr/detail/relaxed_capture_scope.hpp"
#include "cudapmr/detail/stream_ordering.hpp"
#include "cudapmr/device.hpp"
#include "cudapmr/error.hpp"
#include "cudapmr/host_topology.hpp"
#include "cudapmr/pinned_memory_resource.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

namespace cudapmr::detail {
namespace {

constexpr std::size_t staging_set_bytes = staging_block_count * staging_block_bytes;
/// Idle sets whose DMAs still wait on other streams' work, past which a copy
/// takes one of them (and waits) rather than pinning another set.
constexpr std::size_t max_idle_sets_busy_elsewhere = 2;

/// One pipeline's pinned blocks, and for each an event that proves its last
/// DMA finished. Events belong to a device, so a set serves the streams of one.
class staging_set final {
 public:
  staging_set(pinned_memory_resource& pinned, int device, int numa_node)
      : pinned_(&pinned), device_(device), numa_node_(numa_node) {
    memory_ = static_cast<unsigned char*>(pinned.allocate(staging_set_bytes));
    try {
      const scoped_device guard(device);
      for (cudaEvent_t& event : events_) CUDAPMR_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    } catch (...) {
      release();
      throw;
    }
  }
  ~staging_set() { release(); }
  staging_set(const staging_set&) = delete;
  staging_set& operator=(const staging_set&) = delete;

  [[nodiscard]] int device() const noexcept { return device_; }
  /// The node its blocks were asked on, whether or not CUDA put them there.
  [[nodiscard]] int numa_node() const noexcept { return numa_node_; }
  [[nodiscard]] unsigned char* block(std::size_t index) const noexcept { return memory_ + index * staging_block_bytes; }

  /// Blocks until the last DMA that used block `index` has finished. \throws cuda_error.
  void wait_idle(std::size_t index) const {
    const relaxed_capture_scope relaxed;  // another thread's global-mode capture stays valid
    CUDAPMR_CHECK(cudaEventSynchronize(events_[index]));
  }
  /// Marks block `index` in use by the work queued on `stream` so far. \throws cuda_error.
  void in_use_until(std::size_t index, stream_ref stream) {
    CUDAPMR_CHECK(cudaEventRecord(events_[index], stream.get()));
    streams_[index] = stream.get();
  }
  /// Whether a copy on `stream` can use the set without waiting for another
  /// stream's work: each block's last DMA ran on `stream` or has finished.
  /// The per-thread default stream is one handle for many streams: never "own".
  [[nodiscard]] bool serves_without_waiting_on_others(stream_ref stream) const noexcept {
    const relaxed_capture_scope relaxed;
    for (std::size_t index = 0; index < staging_block_count; ++index) {
      const std::optional<cudaStream_t>& last = streams_[index];
      if (!last || (*last == stream.get() && *last != cudaStreamPerThread)) continue;
      if (!recover_from(cudaEventQuery(events_[index]))) return false;  // not ready, or an error: passed over
      streams_[index].reset();  // finished: no need to ask again
    }
    return true;
  }

 private:
  /// Waits for the DMAs, then frees events and memory; errors are ignored (this
  /// also runs at exit, and in a constructor that failed half-way).
  void release() noexcept {
    for (cudaEvent_t& event : events_) {
      if (event == nullptr) continue;
      static_cast<void>(detail::recover_from(cudaEventSynchronize(event)));  // a failed copy's error, or exit
      static_cast<void>(detail::recover_from(cudaEventDestroy(event)));
      event = nullptr;
    }
    pinned_->deallocate(memory_, staging_set_bytes);
  }

  pinned_memory_resource* pinned_;
  int device_;
  int numa_node_;
  unsigned char* memory_ = nullptr;
  std::array<cudaEvent_t, staging_block_count> events_{};
  // The stream of each block's last DMA (0 is the legacy stream); empty: none recorded, or known finished.
  mutable std::array<std::optional<cudaStream_t>, staging_block_count> streams_{};
};

/// The idle staging sets, by device and NUMA node, each node's over a pinned
/// pool of the library's own on that node. Sets are made when every existing
/// one is in use (by concurrent copies) and kept until exit, when the idle
/// ones go back to the pools; the cache itself lives on for copies that still run.
class staging_cache final {
 public:
  /// An idle set for `device` on `numa_node` that a copy on `stream` can use
  /// without waiting for other streams' work, or else a new one; where
  /// `max_idle_sets_busy_elsewhere` idle sets already wait on other streams,
  /// the first of them (the copy then waits). \throws out_of_memory, cuda_error.
  std::unique_ptr<staging_set> acquire(int device, int numa_node, stream_ref stream) {
    {
      const std::lock_guard lock(mutex_);
      const auto take = [&](std::vector<std::unique_ptr<staging_set>>::iterator found) {
        std::unique_ptr<staging_set> set = std::move(*found);
        idle_.erase(found);
        return set;
      };
      auto first_busy = idle_.end();
      std::size_t busy = 0;
      for (auto set = idle_.begin(); set != idle_.end(); ++set) {
        if ((*set)->device() != device || (*set)->numa_node() != numa_node) continue;
        if ((*set)->serves_without_waiting_on_others(stream)) return take(set);
        if (busy++ == 0) first_busy = set;
      }
      if (busy >= max_idle_sets_busy_elsewhere) return take(first_busy);
    }
    return std::make_unique<staging_set>(pinned_on(numa_node), device, numa_node);
  }

  /// The pinned pool of the staging blocks on `numa_node`, made at first use.
  /// \throws std::invalid_argument for a node the machine lacks; cuda_error.
  pinned_memory_resource& pinned_on(int numa_node) {
    const std::lock_guard lock(mutex_);
    std::unique_ptr<pinned_memory_resource>& pinned = pinned_[numa_node];
    if (!pinned) pinned = std::make_unique<pinned_memory_resource>(pinned_pool_options{.numa_node = numa_node});
    return *pinned;
  }

  /// Frees the idle sets, handing their memory back to CUDA's pools; later
  /// copies make new ones.
  void give_back_idle() noexcept {
    std::vector<std::unique_ptr<staging_set>> idle;
    {
      const std::lock_guard lock(mutex_);
      idle.swap(idle_);
    }
    idle.clear();
  }

  /// Keeps `set` for later copies (or frees it, should keeping it fail).
  void release(std::unique_ptr<staging_set> set) noexcept {
    if (keep_nothing_) return;  // `set` frees itself, where compute-sanitizer sees it
    try {
      const std::lock_guard lock(mutex_);
      idle_.push_back(std::move(set));
    } catch (...) {  // `set` frees itself
    }
  }

 private:
  // Declared first: destroyed after the sets (the cache is never destroyed, but
  // its order stays right should that change).
  std::map<int, std::unique_ptr<pinned_memory_resource>> pinned_;
  std::mutex mutex_;  // guards pinned_ and idle_
  const bool keep_nothing_ = detail::caching_disabled();  // CUDAPMR_NO_CACHING=1, read once
  std::vector<std::unique_ptr<staging_set>> idle_;
};

staging_cache& the_staging_cache() {
  // Never destroyed, like the library's other statics: a copy on another
  // thread, or in an exit handler, may run after static destruction began.
  // Its idle memory goes back at exit, before CUDA's teardown (CUDA was
  // initialized before `give_back` was constructed).
  static auto* cache = new staging_cache();
  static const struct give_back_at_exit {
    ~give_back_at_exit() { cache->give_back_idle(); }
  } give_back;
  return *cache;
}

/// The node whose memory and processors stage copies for `device`: the one
/// nearest it, found once per device; `any_numa_node` where none is known.
int staging_node_of(int device) {
  static std::mutex mutex;
  static auto* nodes = new std::map<int, int>();
  const std::lock_guard lock(mutex);
  const auto found = nodes->find(device);
  if (found != nodes->end()) return found->second;
  const int node = nearest_numa_node(device).value_or(any_numa_node);
  nodes->emplace(device, node);
  return node;
}

/// A staging set held for one copy. A copy that fails part-way may have
/// queued a DMA whose event was not recorded: the set is returned only after
/// the stream has drained.
class staging_lease final {
 public:
  staging_lease(stream_ref stream, int numa_node)
      : stream_(stream),
        set_(the_staging_cache().acquire(stream_device(stream), numa_node, stream)),
        exceptions_(std::uncaught_exceptions()) {}
  ~staging_lease() {
    if (std::uncaught_exceptions() > exceptions_) {
      static_cast<void>(detail::recover_from(cudaStreamSynchronize(stream_.get())));  // the failure being thrown
    }
    the_staging_cache().release(std::move(set_));
  }
  staging_lease(const staging_lease&) = delete;
  staging_lease& operator=(const staging_lease&) = delete;

  staging_set* operator->() const noexcept { return set_.get(); }

 private:
  stream_ref stream_;
  std::unique_ptr<staging_set> set_;
  int exceptions_;
};

/// The chunks of a staged copy: chunk `index` covers [offset(index), offset(index) + length(index)).
struct chunking {
  explicit chunking(std::size_t total) : bytes(total), chunk(staging_chunk_bytes(total)) {}
  [[nodiscard]] std::size_t count() const noexcept { return bytes / chunk + (bytes % chunk != 0 ? 1 : 0); }
  [[nodiscard]] std::size_t offset(std::size_t index) const noexcept { return index * chunk; }
  [[nodiscard]] std::size_t length(std::size_t index) const noexcept { return std::min(chunk, bytes - offset(index)); }
  static std::size_t block_of(std::size_t index) noexcept { return index % staging_block_count; }

  std::size_t bytes;
  std::size_t chunk;
};

void copy_async(void* destination, const void* source, std::size_t bytes, stream_ref stream) {
  CUDAPMR_CHECK(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDefault, stream.get()));
}

bool is_device_side(const std::optional<cudaMemoryType>& type) noexcept {
  return type == cudaMemoryTypeDevice || type == cudaMemoryTypeManaged;
}

/// A graph replays its copies long after the staging blocks serve other
/// copies, and events recorded in a capture cannot be waited for.
void refuse_captured(stream_ref stream, std::size_t bytes, const char* what) {
  if (cuda_stream_ordering().is_capturing(stream))
    throw std::invalid_argument(fmt::format("{} of {} bytes on stream {}: the stream is being captured, and a graph "
                                            "cannot replay a copy through staging blocks that serve other copies "
                                            "meanwhile",
                                            what, bytes, fmt::ptr(stream.get())));
}

// The staged copies themselves, for a stream known not to be captured.
void stage_to_device(void* destination, const void* host_source, std::size_t bytes, stream_ref stream,
                     std::optional<int> numa_node);
void stage_to_host(void* host_destination, const void* source, std::size_t bytes, stream_ref stream,
                   std::optional<int> numa_node);

}  // namespace

int staging_numa_node(int device) { return staging_node_of(device); }

const pinned_memory_resource& staging_pool(int numa_node) { return the_staging_cache().pinned_on(numa_node); }

void give_back_idle_staging() noexcept { the_staging_cache().give_back_idle(); }

std::size_t staging_chunk_bytes(std::size_t bytes) noexcept {
  const std::size_t quarter = bytes / staging_block_count;
  const std::size_t rounded = (quarter + host_copy_granule - 1) / host_copy_granule * host_copy_granule;
  return std::clamp(rounded, min_staging_chunk, staging_block_bytes);
}

bool try_staged_copy(void* destination, const void* source, std::size_t bytes, copy_direction direction,
                     stream_ref stream) {
  if (bytes < staged_copy_threshold) return false;
  // Captured: CUDA's own copy from pageable memory, whatever it does in a graph.
  if (cuda_stream_ordering().is_capturing(stream)) return false;
  const bool to_device = direction == copy_direction::to_device;
  if (pointer_memory_type(to_device ? source : destination) != cudaMemoryTypeUnregistered) return false;
  if (!is_device_side(pointer_memory_type(to_device ? destination : source))) return false;
  if (to_device) stage_to_device(destination, source, bytes, stream, std::nullopt);
  else stage_to_host(destination, source, bytes, stream, std::nullopt);
  return true;
}

void staged_copy_to_device(void* destination, const void* host_source, std::size_t bytes, stream_ref stream,
                           std::optional<int> numa_node) {
  if (bytes == 0) return;
  refuse_captured(stream, bytes, "staged_copy_to_device");
  stage_to_device(destination, host_source, bytes, stream, numa_node);
}

void staged_copy_to_host(void* host_destination, const void* source, std::size_t bytes, stream_ref stream,
                         std::optional<int> numa_node) {
  if (bytes == 0) return;
  refuse_captured(stream, bytes, "staged_copy_to_host");
  stage_to_host(host_destination, source, bytes, stream, numa_node);
}

namespace {

void stage_to_device(void* destination, const void* host_source, std::size_t bytes, stream_ref stream,
                     std::optional<int> numa_node) {
  const int node = numa_node ? *numa_node : staging_node_of(stream_device(stream));
  const staging_lease staging(stream, node);
  host_thread_pool& threads = host_copy_pool(node);
  auto* to = static_cast<unsigned char*>(destination);
  const auto* from = static_cast<const unsigned char*>(host_source);
  const chunking chunks(bytes);
  for (std::size_t index = 0; index < chunks.count(); ++index) {
    const std::size_t block = chunking::block_of(index);
    staging->wait_idle(block);
    parallel_memcpy(staging->block(block), from + chunks.offset(index), chunks.length(index), threads);
    copy_async(to + chunks.offset(index), staging->block(block), chunks.length(index), stream);
    staging->in_use_until(block, stream);
  }
}

void stage_to_host(void* host_destination, const void* source, std::size_t bytes, stream_ref stream,
                   std::optional<int> numa_node) {
  const int node = numa_node ? *numa_node : staging_node_of(stream_device(stream));
  const staging_lease staging(stream, node);
  host_thread_pool& threads = host_copy_pool(node);
  auto* to = static_cast<unsigned char*>(host_destination);
  const auto* from = static_cast<const unsigned char*>(source);
  const chunking chunks(bytes);
  // DMA runs up to `staging_block_count` chunks ahead of the host copies.
  auto fetch = [&](std::size_t index) {
    const std::size_t block = chunking::block_of(index);
    staging->wait_idle(block);
    copy_async(staging->block(block), from + chunks.offset(index), chunks.length(index), stream);
    staging->in_use_until(block, stream);
  };
  for (std::size_t index = 0; index < std::min(chunks.count(), staging_block_count); ++index) fetch(index);
  for (std::size_t index = 0; index < chunks.count(); ++index) {
    const std::size_t block = chunking::block_of(index);
    staging->wait_idle(block);
    parallel_memcpy(to + chunks.offset(index), staging->block(block), chunks.length(index), threads);
    if (index + staging_block_count < chunks.count()) fetch(index + staging_block_count);
  }
}

}  // namespace

}  // namespace cudapmr::detail
