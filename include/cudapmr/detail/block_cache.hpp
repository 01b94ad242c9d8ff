// SPDX-License-Identifier: Apache-2.0
#pragma once
// The one cache of freed blocks behind caching_resource, for every kind of
// memory: free blocks by size class, kept per stream, moved between streams only
// through events recorded at a free, and held within a byte budget.

#include "cudapmr/detail/size_classes.hpp"
#include "cudapmr/detail/stream_ordering.hpp"
#include "cudapmr/stream.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace cudapmr::detail {

/// Whether CUDAPMR_NO_CACHING is set to 1: caches made from then on keep
/// nothing, so every free reaches the upstream. For compute-sanitizer's
/// memcheck, which sees a use after free only of memory freed to CUDA: it
/// refuses NVTX heaps over stream-ordered pool memory, all the caches hold.
/// Read at each call.
[[nodiscard]] bool caching_disabled() noexcept;

/// A freed block and its size class.
struct cached_block {
  void* pointer;
  std::size_t size_class;
};

/// A block the cache gives up, and the stream to free it upstream on: work
/// queued there is ordered after every earlier use of the block.
struct evicted_block {
  void* pointer;
  std::size_t size_class;
  stream_ref stream;
};

/// Free blocks by size class. Not thread-safe: the owner holds a lock.
class free_lists {
 public:
  /// A block of `size_class`, or null.
  [[nodiscard]] void* pop(std::size_t size_class) noexcept;
  /// False when the block could not be kept (no memory for the list).
  [[nodiscard]] bool push(std::size_t size_class, void* pointer) noexcept;
  /// Moves every block into `out` and empties the lists. \throws
  /// std::bad_alloc before it moves any, where `out` lacks room and the host memory for it.
  void drain_into(std::vector<cached_block>& out);
  /// As `drain_into`, but the lists keep room for every block moved, until it
  /// comes back (`put_back`) or leaves for good (`let_go`): other blocks
  /// pushed meanwhile cannot take that room.
  void take_all_keeping_room(std::vector<cached_block>& out);
  /// A block `take_all_keeping_room` moved comes back, into its kept room: never fails.
  void put_back(std::size_t size_class, void* pointer) noexcept;
  /// A block `take_all_keeping_room` moved left for good: its room is free again.
  void let_go(std::size_t size_class) noexcept;
  /// Moves blocks into `out`, to be freed on `stream`, largest classes first,
  /// until `bytes` are gone; returns the bytes moved. Where the host has no
  /// memory for `out`, it stops: the rest stay.
  std::size_t drain_bytes_into(std::vector<evicted_block>& out, std::size_t bytes, stream_ref stream) noexcept;
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  [[nodiscard]] std::size_t blocks() const noexcept { return blocks_; }

 private:
  struct class_list {
    std::vector<void*> blocks;
    std::size_t kept_room = 0;  // capacity kept for blocks taken out, beyond the list's size
  };
  std::array<class_list, size_class_count> lists_;
  std::size_t bytes_ = 0;
  std::size_t blocks_ = 0;
};

/// Freed blocks of a stream-ordered resource, reusable:
/// - on the stream that freed them, at once (the stream orders the reuse);
/// - on another stream once they are sealed by an event recorded on the freeing
///   stream after the free: at once when the event has completed, else after
///   the new stream waits for it;
/// - on the host and every stream when they are ready (freed through the pmr
///   path with nothing pending, or their event has completed).
///
/// A stream seals its free blocks when it is new (its first frees), when
/// another stream missed lately (cross-stream demand), or when it holds more
/// than its share (`stream_share`, or by default half the recent live peak
/// split among the streams freeing lately, 4 MiB to an eighth of the
/// budget); a stream that reuses its own frees within its share pays for no
/// event. The cache makes no CUDA call on a stream other than the
/// caller's, so a stream may be destroyed with blocks in the cache: they stay
/// until sealed blocks are reused or the cache is drained after a
/// synchronization of every device. Thread-safe; each stream has its own lock,
/// found through a one-entry thread-local memo.
class block_cache {
 public:
  /// \param max_cached_bytes the budget: the cache keeps no more than this.
  /// With CUDAPMR_NO_CACHING=1 in the environment when it is made, the cache
  /// refuses every block (see caching_disabled()).
  /// \param shrink_interval how fast what the cache may keep follows what is
  /// live down (see note_live()).
  /// \param per_live where set, the cache keeps at most this many times what
  /// is live now (the floor at least) instead of what was lately.
  /// \param stream_share the unsealed bytes a stream keeps before it seals
  /// them (`caching_options::stream_share`); unset, a share that follows
  /// what is live (see share_now()).
  block_cache(stream_ordering& ordering, std::size_t max_cached_bytes, std::chrono::nanoseconds shrink_interval,
              std::optional<double> per_live, std::optional<std::size_t> stream_share);
  ~block_cache();
  block_cache(const block_cache&) = delete;
  block_cache& operator=(const block_cache&) = delete;

  /// A block of `size_class` usable by work queued on `stream` from now on, or null.
  [[nodiscard]] void* take(stream_ref stream, std::size_t size_class) noexcept;
  /// What became of a block handed to the cache.
  enum class give_outcome {
    refused,         ///< the budget is full: the caller frees it upstream
    kept,            ///< cached
    kept_over_live,  ///< cached, and the cache now holds more than is live or was lately: trim_to_live
  };
  /// Keeps a block freed in stream order on `stream`, or refuses it (the
  /// caller then frees it upstream on `stream`).
  [[nodiscard]] give_outcome give(stream_ref stream, std::size_t size_class, void* pointer) noexcept;

  /// After `take` found nothing, where a new block of `size_class` would take
  /// the upstream past the most it has held: a block of the next few classes
  /// up (at most twice the size) usable on `stream`, or null. `size_class`
  /// becomes the block's; pass the pointer to `class_when_freed` at its free.
  [[nodiscard]] void* take_larger(stream_ref stream, std::size_t& size_class) noexcept;
  /// What `class_when_freed` says of a block `note_graph_block` recorded.
  static constexpr std::size_t graph_block = std::numeric_limits<std::size_t>::max();
  /// Records a block the owner allocated upstream during stream capture: a
  /// graph's allocation keeps its address at every launch, so the block goes
  /// back upstream at its free, never into the cache. False when there is no
  /// memory to record it.
  [[nodiscard]] bool note_graph_block(void* pointer) noexcept;
  /// The class of a block freed with a request of `size_class`: the larger
  /// one where `take_larger` handed it out, `graph_block` for a graph's block.
  [[nodiscard]] std::size_t class_when_freed(void* pointer, std::size_t size_class) noexcept;

  /// A block of `size_class` that no queued work can touch, or null.
  [[nodiscard]] void* take_ready(std::size_t size_class) noexcept;
  /// Keeps a block no queued work can touch, or refuses it, as `give`.
  [[nodiscard]] give_outcome give_ready(std::size_t size_class, void* pointer) noexcept;

  /// The owner took a block of `size_class` from upstream; `give` and the
  /// evictions count it back out (what is live is what was taken and is not cached).
  void note_taken_upstream(std::size_t size_class) noexcept;
  /// The owner returned upstream a block the cache handed out, past the cache.
  void note_returned_upstream(std::size_t size_class) noexcept { static_cast<void>(refuse(size_class)); }

  /// After a miss on `stream` for `size_class`: moves into `out` what the
  /// cache should give up before the owner goes upstream: while it holds more
  /// than is live (with the new block, and at least the floor: a 64th of the budget, at most 16 MiB) or
  /// would pass its budget, blocks that no work touches, then sealed ones,
  /// then the stream's own; largest classes first. Each is to be freed
  /// upstream on its `stream`.
  ///
  /// This and the other evictions but `drain` never throw: where the host
  /// has no memory for `out`, blocks stay cached instead (a block leaves the
  /// cache only for `out`), so an eviction may move less than asked.
  void make_room(stream_ref stream, std::size_t size_class, std::vector<evicted_block>& out) noexcept;
  /// After a free on `stream` that `give` or `give_ready` called over the
  /// line (they add its pending bytes to the total first): moves into `out`
  /// what the cache holds beyond what is live, and a little more, as
  /// make_room does. So the cache shrinks
  /// as the program's memory does, and what an idle program keeps is small.
  void trim_to_live(stream_ref stream, std::vector<evicted_block>& out) noexcept;
  /// Everything that can leave without a device synchronization, to be freed
  /// on `stream` (upstream exhaustion, before a retry). False where the host
  /// had no memory to list some of it: those blocks stay cached.
  bool evict_all_ordered(stream_ref stream, std::vector<evicted_block>& out) noexcept;
  /// The blocks freed on `stream` that it may take with no wait: unsealed,
  /// or sealed by it (other streams may take those too, once their event
  /// completes). To be freed on `stream`: its own order puts the free after
  /// its earlier ones.
  void evict_own(stream_ref stream, std::vector<evicted_block>& out) noexcept;
  /// Everything, to be freed on `stream`. Synchronizes every device, after
  /// taking the blocks, when blocks of other streams are among them.
  /// False where the host had no memory to list some blocks after the wait:
  /// those stay cached (evict_all_ordered).
  /// \throws cuda_error if the synchronize fails, std::bad_alloc where the
  /// host has no memory for the lists before it; the blocks then stay cached.
  bool drain(stream_ref stream, std::vector<evicted_block>& out);

  /// Bytes the owner took from upstream through the cache and has not
  /// returned, the cached ones included: what is live in cached blocks is
  /// this less `bytes()` (exact once no call is under way).
  [[nodiscard]] std::size_t held_bytes() const noexcept {
    return static_cast<std::size_t>(std::max<std::int64_t>(0, held_.load(std::memory_order_relaxed)));
  }
  /// Bytes and blocks held, counted under the locks.
  [[nodiscard]] std::size_t bytes() const;
  [[nodiscard]] std::size_t blocks() const;
  [[nodiscard]] std::size_t max_bytes() const noexcept { return max_bytes_; }
  /// Streams the cache keeps an entry for: one per stream handle it has seen.
  [[nodiscard]] std::size_t streams() const;
  /// Bytes held per stream (unsealed and sealed blocks by the stream that freed them; ready ones under null).
  [[nodiscard]] std::vector<std::pair<cudaStream_t, std::size_t>> bytes_by_stream() const;
  /// Events recorded so far: how often streams sealed their frees.
  [[nodiscard]] std::uint64_t seals() const noexcept { return seals_.load(std::memory_order_relaxed); }
  /// Requests served from the cache, and those that went upstream (`note_miss`).
  [[nodiscard]] std::uint64_t hits() const;
  [[nodiscard]] std::uint64_t misses() const noexcept { return misses_.load(std::memory_order_relaxed); }
  void note_miss() noexcept { misses_.fetch_add(1, std::memory_order_relaxed); }
  /// Blocks handed to another stream through an event.
  [[nodiscard]] std::uint64_t cross_stream_reuses() const noexcept { return cross_.load(std::memory_order_relaxed); }

  /// The streams of a cache are told apart by handle; the default streams
  /// (0, legacy, per-thread) by device, and the per-thread one by thread too,
  /// by an ordinal never reused (a new thread may get an ended one's
  /// std::thread::id while that thread's stream still runs its work).
  struct stream_key {
    cudaStream_t stream;
    std::uint64_t thread;
    int device;
    friend bool operator==(const stream_key&, const stream_key&) = default;
    /// Any strict order, for ordered containers of streams.
    friend bool operator<(const stream_key& a, const stream_key& b) noexcept {
      // Built-in `<` on unrelated pointers is unspecified; std::less orders them all.
      if (a.stream != b.stream) return std::less<>{}(a.stream, b.stream);
      return std::tie(a.thread, a.device) < std::tie(b.thread, b.device);
    }
  };
  [[nodiscard]] static stream_key key_of(stream_ref stream, stream_ordering& ordering) noexcept;

 private:
  struct alignas(64) stream_entry {
    explicit stream_entry(const stream_key& stream) : key(stream) {}
    const stream_key key;
    mutable std::mutex mutex;
    free_lists unsealed;   // freed here, no event yet: only this stream may reuse them
    std::uint64_t frees = 0;  // a new stream seals its first frees; every 64th looks at the clock (note_freeing)
    std::int64_t unflushed = 0;  // bytes not yet added to the cache's total
    std::uint64_t hits = 0;  // own blocks taken again: counted under the lock, on no shared cache line
    std::uint32_t window = std::numeric_limits<std::uint32_t>::max();  // the freeing window it last freed in
    std::atomic<std::size_t> sealed{0};  // its blocks in sealed_: written under sealed_mutex_; evict_own skips or ends its scan by it
  };
  struct sealed_event {
    ordering_event event;
    std::size_t references;            // blocks still sealed by it; guarded by sealed_mutex_
    std::atomic<bool> completed{false};
  };
  struct sealed_block {
    void* pointer;
    std::size_t size_class;
    sealed_event* event;
    stream_entry* origin;
  };
  struct alignas(64) ready_shard {
    mutable std::mutex mutex;
    free_lists lists;
    std::atomic<std::size_t> blocks{0};  // read without the lock to skip empty shards
    std::int64_t unflushed = 0;
    std::uint64_t hits = 0;  // blocks taken from it, counted under the lock
  };
  struct alignas(64) entry_shard {
    mutable std::mutex mutex;  // guards `entries`, not the entries' lists
    std::vector<std::unique_ptr<stream_entry>> entries;
  };
  static constexpr std::size_t ready_shard_count = 16;
  static constexpr std::size_t entry_shard_count = 64;

  [[nodiscard]] stream_entry* entry_of(stream_ref stream) noexcept;
  /// The unsealed bytes a stream keeps before it seals them: the option where
  /// set; else half the recent live peak split among the streams that freed
  /// lately (in this freeing window or the last, a second each), between
  /// 4 MiB and an eighth of the budget. So the streams that go quiet keep
  /// about half the live peak between them, at least 4 MiB each, and a
  /// program of few streams seals rarely.
  [[nodiscard]] std::size_t share_now() const noexcept;
  /// Counts `entry`'s stream among those freeing in the current window, and
  /// starts a new window once one has run its length. With the entry's lock held.
  void note_freeing(stream_entry& entry) noexcept;
  [[nodiscard]] std::atomic<std::uint32_t>& recorded_slot(const void* pointer) noexcept;
  /// Bytes cached beyond what may be beside `incoming` more bytes: no more
  /// than is live with them, or an eighth over what was lately (the floor at least),
  /// within the budget.
  [[nodiscard]] std::size_t excess(std::size_t incoming) const noexcept;
  /// Moves about `bytes` into `out`: ready blocks, then sealed ones, then
  /// `stream`'s own; largest classes first.
  void evict(stream_ref stream, std::size_t bytes, std::vector<evicted_block>& out) noexcept;
  /// Moves the entry's unsealed blocks into `out`, to be freed on `stream`
  /// (its own), as evict_all_of.
  bool evict_unsealed(stream_entry& entry, stream_ref stream, std::vector<evicted_block>& out) noexcept;
  /// Moves every block of `lists` into `out`, to be freed on `stream`, and
  /// their bytes out of the total (`unflushed` settled); with the lists'
  /// lock held. False where the host had no memory for `out`: the rest stay.
  bool evict_all_of(free_lists& lists, std::int64_t& unflushed, stream_ref stream,
                    std::vector<evicted_block>& out) noexcept;
  /// A block of the smallest class in [first, last] found: `entry`'s own
  /// (withdrawing its request for sealed blocks), then a ready one, then a
  /// sealed one that `stream` is made to wait for; {null, first} if none.
  [[nodiscard]] cached_block take_between(stream_ref stream, stream_entry* entry, std::size_t first,
                                          std::size_t last) noexcept;
  [[nodiscard]] void* take_ready_from(ready_shard& shard, std::size_t size_class) noexcept;
  [[nodiscard]] void* take_sealed(stream_ref stream, stream_entry* entry, std::size_t size_class) noexcept;
  /// Records an event on `stream` and moves `blocks`, which
  /// `take_all_keeping_room` took from `entry`, to the sealed lists; what
  /// could not be sealed goes back into `entry`, into the room it kept.
  void seal(stream_ref stream, stream_entry& entry, std::vector<cached_block>& blocks) noexcept;
  /// Puts `blocks`, which `take_all_keeping_room` took from `entry`, back among
  /// its unsealed ones, with its lock held; returns their bytes.
  std::int64_t put_back(stream_entry& entry, std::span<const cached_block> blocks) noexcept;
  /// Drops one reference to `event`, recycling it at the last. Called with sealed_mutex_ held.
  void release_reference(sealed_event* event) noexcept;
  /// What an eviction moved, and whether every block it chose reached `out`.
  struct eviction {
    std::size_t bytes = 0;
    bool complete = true;
  };
  /// Moves sealed blocks into `out`, largest classes first, to be freed on
  /// `stream` after it waits for their events, until `bytes` are gone; where
  /// `out` has no room for them all, none (they stay sealed).
  eviction evict_sealed(stream_ref stream, std::size_t bytes, std::vector<evicted_block>& out) noexcept;
  /// Adds a lock holder's `unflushed` count and `change` to the shared total
  /// now: where blocks leave (or a trim is to be measured), so that no count
  /// is left behind that the total lacks.
  void settle(std::int64_t& unflushed, std::int64_t change) noexcept;
  /// Adds `change` bytes to a lock holder's `unflushed` count, and that to the
  /// shared total once it is large: threads rarely write one cache line.
  void account(std::int64_t& unflushed, std::int64_t change) noexcept;
  /// Whether a block of `size_class` fits in the budget (if not, it leaves
  /// the cache: `refuse`), and whether keeping it puts the cache over what is
  /// live or was lately; one read of the shared counts serves both, with the
  /// caller's `unflushed` bytes (its lock held) added to the total.
  [[nodiscard]] give_outcome keeps(std::size_t size_class, std::int64_t unflushed) noexcept;
  /// Before a free: what is live, block included, for the recent peak the
  /// cache may hold; returns the peak as it now stands.
  std::int64_t note_live(std::int64_t live) noexcept;
  /// Counts a block the owner frees upstream instead of caching.
  give_outcome refuse(std::size_t size_class) noexcept;
  /// What the cache may hold beside `live` bytes: no more than is live or was
  /// lately (`peak`) and an eighth, the floor at least, and at most `budget`.
  [[nodiscard]] std::int64_t allowed_cached(std::int64_t live, std::int64_t peak, std::int64_t budget) const noexcept;
  void note_returned(const std::vector<evicted_block>& out, std::size_t first) noexcept;
  /// Calls `visit_shard` for each ready shard and `visit_entry` for each
  /// stream's entry, each under its lock: what the counts walk.
  template <typename ShardVisitor, typename EntryVisitor>
  void visit_locked(ShardVisitor&& visit_shard, EntryVisitor&& visit_entry) const;

  stream_ordering& ordering_;
  const std::size_t max_bytes_;
  const std::int64_t shrink_interval_;  // nanoseconds
  const std::optional<double> per_live_;  // see the constructor
  const std::optional<std::size_t> stream_share_;  // unsealed bytes a stream keeps before it seals; unset: share_now()
  const std::size_t least_share_;  // the share is never less: below it a free does not compute share_now()
  const std::int64_t floor_bytes_;  // what the cache may keep however little is live: a 64th of the budget, at most 16 MiB
  const std::int64_t flush_bytes_;  // see account()
  const std::uint64_t identity_;    // tells this cache from any other in the memo
  const bool keep_nothing_;         // CUDAPMR_NO_CACHING=1 when the cache was made
  std::atomic<std::int64_t> below_since_{0};   // steady-clock ns since which what is live stayed below the peak; 0: not below
  std::atomic<std::uint32_t> frees_below_{0};  // frees while below: every 32nd looks at the clock
  std::atomic<std::int64_t> approximate_bytes_{0};  // within a few MiB per stream of the truth
  std::atomic<std::int64_t> held_{0};  // bytes taken from upstream through the owner and not returned
  std::atomic<std::int64_t> most_held_{0};  // the most held_ has been since the recent peak last fell
  std::atomic<std::int64_t> recent_live_peak_{0};  // see note_live()
  std::atomic<std::uint64_t> seals_{0};
  // Streams that freed in the current and the last freeing window (indexed by
  // the window's parity): read at frees past the least share, written at a
  // stream's first free of a window.
  std::atomic<std::uint32_t> window_{0};
  std::atomic<std::int64_t> window_start_;  // steady-clock ns
  std::mutex window_mutex_;  // held by the one thread that starts a window
  std::array<std::atomic<std::size_t>, 2> freeing_streams_{};
  std::atomic<std::uint64_t> sealed_hits_{0};  // hits from the sealed lists (others: in their entry or shard)
  std::atomic<std::uint64_t> misses_{0};
  std::atomic<std::uint64_t> cross_{0};
  std::atomic<stream_entry*> wanting_{nullptr};  // the stream that missed last
  std::atomic<std::uint32_t> unanswered_seals_{0};  // seals for it since it last took a sealed block
  std::array<ready_shard, ready_shard_count> ready_;
  std::array<entry_shard, entry_shard_count> entries_;
  std::mutex recorded_mutex_;
  // Blocks out with a class other than their request's (take_larger) or from a graph, by pointer.
  std::unordered_map<const void*, std::size_t> recorded_classes_;
  // How many recorded blocks hash to each slot: a free whose slot is empty needs no lock.
  std::array<std::atomic<std::uint32_t>, 1024> recorded_filter_{};
  mutable std::mutex sealed_mutex_;
  std::array<std::vector<sealed_block>, size_class_count> sealed_;
  std::atomic<std::size_t> sealed_blocks_{0};
};

}  // namespace cudapmr::detail
