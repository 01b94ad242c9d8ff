#pragma once
// The caches behind caching_resource and the pools' fast pmr path: free
// blocks by size class, sharded so that threads rarely meet on one lock.

#include "cudapmr/detail/size_classes.hpp"
#include "cudapmr/stream.hpp"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace cudapmr::detail {

/// A freed block and its size class.
struct cached_block {
  void* pointer;
  std::size_t size_class;
};

/// Free blocks by size class. Not thread-safe: the owner holds a lock.
class free_lists {
 public:
  /// A block of `size_class`, or null.
  [[nodiscard]] void* pop(std::size_t size_class) noexcept;
  /// False when the block could not be kept (no memory for the list).
  [[nodiscard]] bool push(std::size_t size_class, void* pointer) noexcept;
  /// Moves every block into `out` and empties the lists.
  void drain_into(std::vector<cached_block>& out);
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  [[nodiscard]] std::size_t blocks() const noexcept { return blocks_; }

 private:
  std::array<std::vector<void*>, size_class_count> lists_;
  std::size_t bytes_ = 0;
  std::size_t blocks_ = 0;
};

/// Blocks whose last use has completed: usable at once on the host and on any
/// stream. Sharded by thread; a thread whose own shard is empty looks in the others.
class ready_block_cache {
 public:
  [[nodiscard]] void* take(std::size_t size_class) noexcept;
  [[nodiscard]] bool give(std::size_t size_class, void* pointer) noexcept;
  void drain_into(std::vector<cached_block>& out);
  [[nodiscard]] std::size_t bytes() const;
  [[nodiscard]] std::size_t blocks() const;

 private:
  static constexpr std::size_t shard_count = 16;
  struct alignas(64) shard {
    mutable std::mutex mutex;
    free_lists lists;
    std::atomic<std::size_t> blocks{0};  // read without the lock to skip empty shards
  };
  [[nodiscard]] static void* take_from(shard& from, std::size_t size_class) noexcept;
  std::array<shard, shard_count> shards_;
};

/// Blocks freed in stream order, kept per stream: later work on the same
/// stream may reuse them with no CUDA call, since the stream orders it after
/// every earlier use. Each stream has its own lock, so threads on different
/// streams never wait for each other; a thread finds its stream's entry
/// through a one-entry thread-local memo, without touching shared state.
/// Entries live as long as the cache; release only empties them.
class stream_block_cache {
 public:
  stream_block_cache();
  [[nodiscard]] void* take(stream_ref stream, std::size_t size_class) noexcept;
  [[nodiscard]] bool give(stream_ref stream, std::size_t size_class, void* pointer) noexcept;
  void drain_into(std::vector<cached_block>& out);
  [[nodiscard]] std::size_t bytes() const;
  [[nodiscard]] std::size_t blocks() const;

  /// cudaStreamPerThread names a different stream in each thread, so the
  /// thread is part of its key.
  struct stream_key {
    cudaStream_t stream;
    std::thread::id thread;
    friend bool operator==(const stream_key&, const stream_key&) = default;
  };
  struct alignas(64) entry {
    explicit entry(const stream_key& stream) : key(stream) {}
    const stream_key key;
    std::mutex mutex;
    free_lists lists;
  };

 private:
  static constexpr std::size_t shard_count = 64;
  struct alignas(64) shard {
    mutable std::mutex mutex;  // guards `entries`, not the entries' lists
    std::vector<std::unique_ptr<entry>> entries;
  };
  [[nodiscard]] static stream_key key_of(stream_ref stream) noexcept;
  /// The stream's entry, created on first use; null if that fails.
  [[nodiscard]] entry* entry_of(stream_ref stream) noexcept;

  /// Distinguishes this cache from any other, past or present, in the memo.
  const std::uint64_t identity_;
  std::array<shard, shard_count> shards_;
};

/// Hit and miss counters, one cache line per thread shard so that counting
/// never contends.
class cache_counters {
 public:
  void hit() noexcept { local().hits.fetch_add(1, std::memory_order_relaxed); }
  void miss() noexcept { local().misses.fetch_add(1, std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t hits() const noexcept;
  [[nodiscard]] std::uint64_t misses() const noexcept;

 private:
  struct alignas(64) counters {
    std::atomic<std::uint64_t> hits{0};
    std::atomic<std::uint64_t> misses{0};
  };
  counters& local() noexcept;
  std::array<counters, 16> shards_;
};

}  // namespace cudapmr::detail
