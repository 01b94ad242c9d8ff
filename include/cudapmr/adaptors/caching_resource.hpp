// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file caching_resource.hpp
/// The fast front end of any stream_ordered_resource: a bounded cache of freed
/// blocks by size class, shared between streams in a safe order.

#include "cudapmr/adaptors/resource_adaptor.hpp"
#include "cudapmr/detail/block_cache.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cudapmr {

/// The largest block any cache keeps (its largest size class).
inline constexpr std::size_t largest_cached_block = std::size_t{1} << 40;

/// Options of a caching_resource.
struct caching_options {
  /// Requests larger than this (capped at `largest_cached_block`), or aligned
  /// past 256 bytes, go straight upstream.
  std::size_t max_cached_block = std::size_t{1} << 30;
  /// The most bytes the cache holds free. Past it, freed blocks go back
  /// upstream at once, and a miss first returns what would pass it. Unset: an
  /// eighth of the memory of the upstream's device (17.6 GB on an H200) and at
  /// least 1 GiB, or 1 GiB where the upstream's memory is no one device's
  /// (pinned, pageable). Past 2^63 - 1 counts as that.
  /// What the cache keeps follows what is live well below this bound.
  std::optional<std::size_t> max_cached_bytes;
  /// Ask CUDA at every allocation and free whether the stream is being
  /// captured into a graph (a driver call: some 35 ns each on an H200's
  /// host). Turn it off only where no stream the cache sees is ever captured.
  bool check_capture = true;
  /// How fast the cache follows a program's memory down: once what is live
  /// has stayed an eighth below its recent peak for an interval, what the
  /// cache may keep falls by an eighth per interval (by half in some five). Longer keeps memory for a
  /// working set that comes back (up to a year); zero shrinks at every 32nd such free.
  std::chrono::milliseconds shrink_interval{200};
  /// Unset: the cache keeps what was live lately, as above. Set to x: at most
  /// x times what is live now (the floor at least), with no memory of the
  /// peak, so that a program that frees what it holds leaves the cache at its
  /// floor. For an upstream that merges the blocks it gets back, such as
  /// `coalescing_resource`, where a block handed back serves any size again.
  /// Must be finite and positive; `device_stack`'s front uses 4.
  std::optional<double> max_cached_per_live;
  /// On: an asynchronous request past `max_cached_block` on a stream (not
  /// during capture) first hands back upstream, on that stream and with no
  /// wait, the blocks it freed that it could take again at once (those not
  /// yet offered to other streams, and those it offered with an event). For
  /// an upstream that merges them, such as `coalescing_resource`: it serves
  /// the large request, or the next small ones of other sizes, from them
  /// instead of growing, so a working set whose sizes change from step to
  /// step (a training loop with a varying sequence length) holds no blocks of
  /// an earlier step's sizes beside this step's large ones. The cost: small
  /// requests on a stream that also makes large ones miss more often (each
  /// miss an upstream call). `device_stack`'s front turns it on.
  bool hand_back_before_large = false;
  /// Past this many bytes freed and not yet offered, a stream's free records
  /// an event and offers all of them to every stream: others may then reuse
  /// them, and trims on any stream may hand them back. A stream also offers
  /// at its first frees and when another stream missed lately; otherwise
  /// only the stream itself reuses or trims them, so a stream that goes quiet
  /// keeps up to this much. Unset (the default), the share follows what is
  /// live: half the recent peak of live bytes split among the streams that
  /// freed in the last second or two, at least 4 MiB and at most an eighth of
  /// `max_cached_bytes`. So the streams that go quiet keep about half of what
  /// was live between them (at least 4 MiB each), and a program of one or a
  /// few streams offers rarely. Set: a fixed share; at or past the budget,
  /// never by size.
  /// Smaller: a program of many streams holds less, at an event record per
  /// offer (0: one at every free), and the stream's own reuse of offered
  /// blocks goes through the list every stream shares.
  std::optional<std::size_t> stream_share;
};

/// What a caching_resource has done and holds.
struct cache_statistics {
  /// Requests served from the cache, with no upstream call.
  std::uint64_t hits = 0;
  /// Cacheable requests that went upstream.
  std::uint64_t misses = 0;
  /// Memory held in the cache, free, in bytes and blocks.
  std::size_t cached_bytes = 0;
  std::size_t cached_blocks = 0;
  /// The budget: `caching_options::max_cached_bytes`, or the default it chose.
  std::size_t max_cached_bytes = 0;
  /// Events recorded to hand freed blocks to other streams, and blocks so handed.
  std::uint64_t events_recorded = 0;
  std::uint64_t cross_stream_reuses = 0;
  /// Memory the upstream holds from the system, as its `state().reserved_bytes`
  /// says: a pool's reserve, what `device_malloc_resource` allocated, what a
  /// `virtual_memory_resource` has mapped; none where the upstream cannot tell.
  std::optional<std::size_t> upstream_reserved;
  /// Streams with an entry in the cache: one per stream handle seen (CUDA
  /// gives a destroyed stream's handle to a later stream, which reuses it).
  std::size_t streams = 0;
};

/// Caches freed blocks by size class (four per power of two) so that a free
/// followed by an allocation reuses memory with no CUDA call, and never hands
/// a block out while queued work may still touch it:
///
/// - A block freed with `deallocate_async` on stream S is reused by later
///   allocations on S at once: S orders them after every earlier use.
/// - Another stream T gets it once S has recorded an event after the free:
///   at once if the event has completed, else T first waits for it. S records
///   one when it is new, when another stream has missed lately, or when it
///   holds more than its `stream_share` freed, so a stream that reuses its own
///   frees within that records none.
/// - pmr `deallocate` is a free on the bound stream. While `bound_stream()`
///   has never been handed out no work can be pending there, so the block is
///   ready for the host and every stream at once; after that, pmr `allocate`
///   reuses such blocks only in stream order and synchronizes.
/// - The cache holds at most `max_cached_bytes`, and never much more than is
///   live or was lately: an eighth over the recent peak of what is live, or a
///   64th of the budget up to 16 MiB. The peak follows a rise at once and,
///   once what is live has stayed an eighth below it for `shrink_interval`,
///   falls by an eighth per interval.
///   A miss that would take the upstream past the most it has held is served
///   by a cached block of one of the next four classes up (at most twice the
///   request's class) where there is one, so blocks of classes that went cold
///   serve the classes in demand instead of piling up beside new ones; at its
///   free such a block goes back to its own class.
///   A miss first returns what is over, largest classes first, so a growing
///   working set leaves no trail, and a free returns what is over, so the
///   cache follows a program's memory down within some intervals of its
///   going on with less (a program that stops freeing keeps what it cached;
///   `release()` gives everything back). Only blocks of the
///   freeing stream, blocks no work touches and blocks sealed by an event can
///   leave at a free. On upstream exhaustion, for any request it passes on
///   (those too large to cache included), it returns all it can and retries,
///   then synchronizes every device, returns everything, trims the upstream
///   (a pool's unused reserve) and retries.
/// - On a stream being captured into a graph, allocations and frees go
///   upstream (the pool's graph nodes): a cached block never enters a graph
///   (unless `check_capture` is off). A block allocated during capture goes
///   back upstream at its free, whenever that is: a graph's allocation keeps
///   its address at every launch.
/// - With `CUDAPMR_NO_CACHING=1` in the environment when it is made, it keeps
///   nothing: every free goes upstream, where compute-sanitizer's memcheck
///   sees a later use (it cannot see into a cache of pool memory).
///
/// Thread-safe; caches are sharded by stream and by thread, with no global
/// lock on the hit path. CUDA may give a destroyed stream's handle to the
/// next stream created: blocks freed on the old one then serve the new one at
/// once, which is safe when the old stream's work had finished (a
/// `cudapmr::stream` waits for it when destroyed; synchronize other streams
/// before destroying them).
class caching_resource final : public resource_adaptor {
 public:
  /// A `max_cached_block` past `largest_cached_block` counts as that.
  /// \throws std::invalid_argument for a negative `shrink_interval` or a `max_cached_per_live` that is not finite and positive.
  explicit caching_resource(stream_ordered_resource& upstream, caching_options options = {});
  /// As above, ordering streams through `ordering` (tests play CUDA with it).
  caching_resource(stream_ordered_resource& upstream, caching_options options, detail::stream_ordering& ordering);
  /// Releases the cache. Never throws.
  ~caching_resource() override;

  /// Hands every cached block back upstream, on the upstream's bound stream,
  /// after it waits for the blocks' events, or after every device has been
  /// synchronized where blocks of other streams are held. \throws cuda_error
  /// if a synchronize fails; std::bad_alloc where the host had no memory to
  /// list every block (those listed went back, the rest stay cached).
  void release();
  /// Hands back what can go with no wait on the host: blocks no work
  /// touches, sealed blocks (the upstream's bound stream waits for their
  /// events) and the bound stream's own. Blocks other streams freed and
  /// never sealed stay. For a program's end, where a wait could hang on work
  /// that never finishes. \throws std::bad_alloc where the host had no
  /// memory to list every block: those listed went back, the rest stay cached.
  void release_without_waiting();
  [[nodiscard]] cache_statistics statistics() const;
  /// Bytes cached per stream (blocks ready for any stream are under null).
  [[nodiscard]] std::vector<std::pair<cudaStream_t, std::size_t>> cached_bytes_by_stream() const {
    return cache_.bytes_by_stream();
  }
  [[nodiscard]] const caching_options& options() const noexcept { return options_; }
  [[nodiscard]] std::string description() const override { return describe_as("caching_resource"); }

 private:
  void* do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) override;
  void do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept override;
  void* do_allocate(std::size_t bytes, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override;

  /// Alignment of every block the cache asks for; what pools guarantee.
  static constexpr std::size_t block_alignment = 256;
  // Defined here, inline: both run at every allocate and free.
  [[nodiscard]] bool is_cacheable(std::size_t bytes, std::size_t alignment) const noexcept {
    return bytes != 0 && alignment <= block_alignment && bytes <= options_.max_cached_block;
  }
  [[nodiscard]] bool is_captured(stream_ref stream) const noexcept {
    return options_.check_capture && ordering_.is_capturing(stream);
  }
  /// A block of `size_class` from upstream after a miss on `stream` for
  /// `requested` bytes; out_of_memory names `requested`.
  [[nodiscard]] void* allocate_block(std::size_t requested, std::size_t alignment, std::size_t size_class,
                                     stream_ref stream);
  /// The same, first returning what the cache should give up.
  [[nodiscard]] void* allocate_class(std::size_t size_class, stream_ref stream);
  /// `bytes` from upstream on `stream`; when it is exhausted, first after
  /// returning what can leave in stream order, then after `trim` (the whole
  /// cache, after every device is idle, and the upstream's unused reserve).
  [[nodiscard]] void* allocate_upstream(std::size_t bytes, std::size_t alignment, stream_ref stream);
  /// Hands back the whole cache on `stream` (after every device is idle where
  /// other streams' blocks are held), then trims the upstream.
  void do_trim(stream_ref stream) override;
  /// Used: what is live through the cache, its blocks as whole size classes
  /// and what it passed upstream uncached (too large, over-aligned, captured)
  /// as asked; cached: its free blocks.
  void do_report(resource_state& state) const override;
  void free_upstream(const std::vector<detail::evicted_block>& blocks) noexcept;
  /// After a free the cache kept: frees upstream, on `stream`, what it holds beyond what is live.
  void trim_to_live(stream_ref stream) noexcept;
  /// Before a request too large to cache (`hand_back_before_large`): frees
  /// upstream, on `stream`, the blocks it freed that need no wait.
  void hand_back_own(stream_ref stream) noexcept;
  /// Runs `evict` for `stream` and frees upstream, on the streams it names, what it listed.
  void evict_and_free(void (detail::block_cache::*evict)(stream_ref, std::vector<detail::evicted_block>&) noexcept,
                      stream_ref stream) noexcept;

  /// Counts `bytes` of an allocation passed upstream uncached (too large,
  /// over-aligned, captured) in or out of what the report calls used.
  void note_passed(std::size_t bytes) noexcept {
    passed_live_.fetch_add(static_cast<std::int64_t>(bytes), std::memory_order_relaxed);
  }
  void note_passed_back(std::size_t bytes) noexcept {
    passed_live_.fetch_sub(static_cast<std::int64_t>(bytes), std::memory_order_relaxed);
  }

  caching_options options_;
  detail::stream_ordering& ordering_;
  detail::block_cache cache_;
  std::size_t device_memory_bytes_;  // past it, out-of-memory needs no trim
  // Live bytes passed upstream uncached (note_passed); signed, so that a
  // wrong free of a large block (whose size no one checks here) cannot wrap it.
  std::atomic<std::int64_t> passed_live_{0};
};

/// The process's pinned resource for std::pmr containers and other host-side
/// use: a `caching_resource` over a `pinned_memory_resource` of the driver's
/// default pinned pool (blocks up to 256 MiB cached), so that a warm allocate +
/// deallocate makes no CUDA call. Made on first use, its bound stream on the
/// then current device; never destroyed, its cache handed back to the pool at
/// exit. To return memory to the system: `trim(stream)`. \throws cuda_error where no device exists.
[[nodiscard]] caching_resource& default_pinned_resource();
/// The same over the driver's default managed pool (the upstream, a
/// `managed_memory_resource`, prefetches and advises).
[[nodiscard]] caching_resource& default_managed_resource();

}  // namespace cudapmr
