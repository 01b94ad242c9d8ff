// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file coalescing_resource.hpp
/// The frugal front end of any stream_ordered_resource: blocks carved from
/// large upstream segments, best fit, split on allocation and merged on free.

#include "cudapmr/adaptors/resource_adaptor.hpp"
#include "cudapmr/detail/block_cache.hpp"
#include "cudapmr/detail/stream_ordering.hpp"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace cudapmr {

/// Options of a coalescing_resource. The defaults are those of PyTorch's
/// caching allocator but for large segments, which it sizes at 20 MiB for
/// requests under 10 MiB.
struct coalescing_options {
  /// Requests up to this many bytes share small segments; larger ones are
  /// carved from large segments, and only those split off a remainder past this.
  std::size_t small_request = std::size_t{1} << 20;
  /// The bytes of a small segment; at least `small_request`.
  std::size_t small_segment = std::size_t{2} << 20;
  /// A large segment is the request that needed it, rounded up to this (a power of two).
  std::size_t segment_granularity = std::size_t{2} << 20;
  /// Ask CUDA at every allocation and free whether the stream is being
  /// captured into a graph (see coalescing_resource). Turn it off only where
  /// no stream the resource sees is ever captured.
  bool check_capture = true;
  /// Where nonzero, a large segment is at least the smaller of this and a
  /// 32nd of the most lately in use (rounded as above): once much is in use,
  /// several large requests share a segment and its remainder serves the next
  /// ones (fewer upstream calls, less rounding lost), while a small working set
  /// keeps segments of its requests' size. 0: each large request its own segment.
  std::size_t shared_large_segment = 0;
  /// The most bytes of wholly free segments kept, all streams together (at least half
  /// the most that was in use since `release_idle()`, `release()` or `trim()`
  /// last ran, so that a working set that dips and comes back finds its
  /// segments): past it, a free on a segment's own stream that leaves the
  /// segment wholly free returns that stream's wholly free segments upstream,
  /// largest first, in its order, and a new segment first returns the
  /// stream's wholly free segments too small for it, so what the resource
  /// holds follows what is live; `release_idle()` returns all but this.
  /// Unset: they stay until reused, `release()`, `trim()` or exhaustion.
  std::optional<std::size_t> max_idle_bytes;
};

/// What a coalescing_resource holds and has done.
struct coalescing_statistics {
  /// Segments held from upstream, in bytes now and at most, and in number.
  std::size_t reserved_bytes = 0;
  std::size_t reserved_peak = 0;
  std::size_t segments = 0;
  /// Bytes of the blocks handed out (rounded to 512), now and at most.
  std::size_t used_bytes = 0;
  std::size_t used_peak = 0;
  /// Segments taken from and given back to the upstream.
  std::uint64_t segment_allocations = 0;
  std::uint64_t segment_frees = 0;
  /// Blocks freed on another stream than their own, waiting for the event recorded at the free.
  std::size_t pending_blocks = 0;
  /// Blocks freed during a stream capture: never reused (a graph may touch them at any launch).
  std::size_t retired_blocks = 0;
  /// Wholly free segments of one stream taken over by another that missed.
  std::uint64_t segments_adopted = 0;
  /// Streams with a pool of segments: one per stream handle seen.
  std::size_t streams = 0;
  /// Blocks handed out from segments, ever.
  std::uint64_t blocks_handed_out = 0;
};

/// Serves requests from segments it takes from the upstream, as a framework's
/// caching allocator does: a request takes the smallest free block that fits
/// (rounded up to 512 bytes), which is split when what is left is worth
/// keeping, and a free merges the block with its free neighbours. A segment
/// that has no free block large enough is added, sized to the request (small
/// requests share `small_segment`s). So memory of one size serves requests of
/// any other, and what the upstream holds stays close to the most that was live.
///
/// - A segment belongs to the stream it was allocated on; its blocks serve
///   that stream only. A block freed with `deallocate_async` on its own stream
///   is free again at once (the stream orders its reuse). Freed on another
///   stream, it waits for an event recorded there at the free and is free once
///   the event has completed (looked at on each allocation, and on each free
///   where `max_idle_bytes` is set). A free on its
///   own stream that leaves a segment wholly free records an event there, and
///   another stream that finds no free block takes such a segment over (the
///   smallest that fits and is at most twice the request, after waiting for
///   the event) before it asks the upstream for a new one: a stream per
///   request that frees on its own stream reuses the last one's memory. A
///   segment left wholly free by frees on other streams stays with its stream
///   until that stream reuses it, `release()`, `trim()`, `release_idle()` or
///   the upstream refuses. With `max_idle_bytes` set, a free on a stream gives
///   that stream's wholly free segments back, in its order, while the idle
///   bytes of all streams pass the bound it describes.
///   A new segment that would take the resource past the most it has held (or
///   the idle bytes past that bound) first returns the stream's wholly free
///   segments that are too small for it: a growing working set leaves no trail.
/// - pmr `allocate` and `deallocate` work in order on the bound stream and
///   synchronize after allocating, as every resource does.
/// - Segments go back upstream with `release()`, at destruction, and when the
///   upstream refuses a new segment: first the wholly free segments of the
///   requesting stream (in its order), then, after every device is
///   synchronized, every wholly free segment and the upstream's unused
///   reserve (`trim`); then it retries.
/// - On a stream being captured into a graph (unless `check_capture` is off),
///   allocations go straight upstream (a graph node, whose address the graph
///   keeps) and return upstream at their free. A block of a segment freed
///   during a capture is retired, never reused while the resource lives: the
///   graph may touch it at every launch.
/// - Zero-byte requests and alignments past 256 bytes go straight upstream.
/// - A pointer it did not hand out, or one freed twice, is ignored.
/// - Streams are told apart by handle: destroy a stream only once its work is
///   done (a `cudapmr::stream` waits for it) when its handle may come back.
///
/// Thread-safe; one lock per resource, never held across an upstream call or a
/// wait (a callback below may free through the resource). It suits allocations
/// of tensors, not millions of tiny pairs a second (caching_resource is for those).
class coalescing_resource final : public resource_adaptor {
 public:
  /// \throws std::invalid_argument naming the option for a zero `small_request`,
  /// a `small_segment` below it or a `segment_granularity` that is not a power of two.
  explicit coalescing_resource(stream_ordered_resource& upstream, coalescing_options options = {});
  /// As above, ordering streams through `ordering` (tests play CUDA with it).
  coalescing_resource(stream_ordered_resource& upstream, coalescing_options options,
                      detail::stream_ordering& ordering);
  /// Releases the wholly free segments, counting blocks retired by captures
  /// as free after synchronizing every device (no graph may use the
  /// resource's memory after it). Never throws; segments with blocks still out
  /// stay with the upstream.
  ~coalescing_resource() override;

  /// Hands every wholly free segment back upstream on the bound stream, after
  /// synchronizing every device where segments or pending blocks of other
  /// streams are held. \throws cuda_error if a synchronize fails, having
  /// handed back the bound stream's own wholly free segments.
  void release();
  /// Hands back upstream, on the bound stream and largest first, the wholly
  /// free segments that no queued work can touch any more (the event of the
  /// free on their own stream that emptied them has completed, or all their
  /// blocks came back through completed events of other streams' frees),
  /// until what stays is at most `max_idle_bytes` (none where unset); the bound
  /// of what is kept at frees starts again from what is in use. A segment
  /// emptied by another stream's free after frees on its own is not known
  /// idle and stays. Never waits and never synchronizes, and does nothing
  /// while the bound stream is captured: for a thread that gives back what
  /// an idle program holds. Returns the bytes handed back.
  std::size_t release_idle() noexcept { return release_idle(options_.max_idle_bytes.value_or(0)); }
  /// As `release_idle()`, handing back segments known idle until the idle
  /// bytes are at most `keep` (segments not known idle count, and stay).
  std::size_t release_idle(std::size_t keep) noexcept;
  /// Whether a free still waits for work queued before it: a block freed on
  /// another stream whose event has not completed, or a wholly free segment
  /// whose own stream's event has not. `release_idle` gives such memory back
  /// once the work is done; a segment not known idle does not count.
  [[nodiscard]] bool has_frees_waiting_on_work() const noexcept;
  [[nodiscard]] coalescing_statistics statistics() const;
  [[nodiscard]] const coalescing_options& options() const noexcept { return options_; }
  [[nodiscard]] std::string description() const override { return describe_as("coalescing_resource"); }

  /// The bytes a block of `bytes` takes: rounded up to 512.
  [[nodiscard]] static constexpr std::size_t block_bytes(std::size_t bytes) noexcept {
    return (bytes + block_rounding - 1) / block_rounding * block_rounding;
  }

 private:
  struct segment;
  /// A piece of a segment, free or out; blocks of a segment are linked in address order.
  struct block {
    std::byte* pointer;
    std::size_t size;
    segment* owner;
    block* previous;
    block* next;
    bool free;
  };
  /// Best fit; among equal sizes, the oldest segment's lowest block: older
  /// segments fill first, so newer ones empty and can go back upstream.
  struct by_size {
    bool operator()(const block* a, const block* b) const noexcept;
  };
  using stream_key = detail::block_cache::stream_key;
  struct stream_pool {
    explicit stream_pool(const stream_key& of) : key(of) {}
    const stream_key key;
    std::set<block*, by_size> small_free;
    std::set<block*, by_size> large_free;
    /// Bytes of this stream's wholly free segments, kept as segments empty and
    /// fill (`idle_bytes_` is all streams' together), so that a free finds at once whether they pass the bound.
    std::size_t idle_bytes = 0;
  };
  /// Owns its blocks, linked from `first`.
  struct segment {
    segment(std::byte* start, std::size_t bytes, bool of_small_requests, stream_pool* owner);
    ~segment();
    segment(const segment&) = delete;
    segment& operator=(const segment&) = delete;
    [[nodiscard]] bool wholly_free() const noexcept { return first->free && first->next == nullptr; }
    std::byte* base;
    std::size_t size;
    bool small;
    stream_pool* pool;
    std::uint64_t sequence = 0;  // order of creation
    block* first;
    /// When its last block freed on its own stream was freed, in `frees_in_order_`'s count.
    std::uint64_t last_free = 0;
    /// When it was made, in the same count: a synchronize begun before covers none of its uses.
    std::uint64_t made = 0;
    /// Recorded on the segment's stream by the free that left it wholly free
    /// (or as it was made, where another free fitted the request better):
    /// another stream may take the segment over once it waits for this.
    detail::ordering_event idle_event = nullptr;
  };
  struct pending_free {
    block* freed;
    detail::ordering_event event;
    stream_key stream;  // where the event was recorded
  };

  static constexpr std::size_t block_rounding = 512;
  static constexpr std::size_t block_alignment = 256;
  /// Requests past this go straight upstream: no device has so much memory, and rounding them could overflow.
  static constexpr std::size_t largest_carved_request = std::size_t{1} << 48;

  void* do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) override;
  void do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept override;

  [[nodiscard]] static bool is_carved(std::size_t bytes, std::size_t alignment) noexcept {
    return bytes != 0 && bytes <= largest_carved_request && alignment <= block_alignment;
  }
  [[nodiscard]] bool is_captured(stream_ref stream) const noexcept {
    return options_.check_capture && ordering_.is_capturing(stream);
  }
  [[nodiscard]] stream_key key_of(stream_ref stream) const noexcept {
    return detail::block_cache::key_of(stream, ordering_);
  }
  /// The pool of `stream`, made on first use.
  [[nodiscard]] stream_pool& pool_of(stream_ref stream);
  /// The pool of `stream` if it has one; takes the lock.
  [[nodiscard]] stream_pool* existing_pool(stream_ref stream) const;
  /// Hands back every wholly free segment on `stream` as `release` does, then trims the upstream.
  void do_trim(stream_ref stream) override;
  void do_report(resource_state& state) const override;
  /// The smallest free block of `pool` that fits `size`, split to it; null if none.
  [[nodiscard]] block* take_best_fit(stream_pool& pool, std::size_t size, bool small);
  /// Records `taken` as handed out; returns its pointer. Called with the lock held.
  void* hand_out(block* taken);
  /// A block of `size` from a new segment of `pool`'s stream, after giving back
  /// what the upstream may lack. Called without the lock: a callback below may free through this resource.
  [[nodiscard]] void* allocate_from_new_segment(stream_pool& pool, std::size_t size, bool small,
                                                std::size_t requested, std::size_t alignment, stream_ref stream);
  /// The bytes of a new segment for a request of `size`. Called with the lock held (it reads what is in use).
  [[nodiscard]] std::size_t segment_bytes(std::size_t size, bool small) const noexcept;
  /// Keeps `freed` out of use until the resource is destroyed.
  void retire(block* freed) noexcept;
  /// Marks `freed` free and merges it with free neighbours.
  void make_free(block* freed) noexcept;
  /// A wholly free segment of another stream, idle since its event, of at least
  /// `bytes`, made `pool`'s after `stream` waits for the event; null if none.
  [[nodiscard]] segment* adopt_idle_segment(stream_pool& pool, std::size_t bytes, bool small, stream_ref stream) noexcept;
  void forget_idle_event(segment& held) noexcept;
  /// Frees the blocks whose events have completed (all of them after a synchronize).
  /// Events of one stream complete in order: past the first that has not, none of that stream's is asked about.
  void collect_pending(bool all_completed) noexcept;
  using segment_map = std::unordered_map<const std::byte*, std::unique_ptr<segment>>;
  /// Moves the wholly free segment at `each` out of the resource into `out`;
  /// false (the segment stays) when there is no memory for the list. Called with the lock held.
  bool take_out(segment_map::iterator each, std::vector<std::unique_ptr<segment>>& out) noexcept;
  /// Moves into `out` the wholly free segments smaller than `below` of `only`,
  /// or, if null, of every stream whose own frees came before `freed_by`
  /// (segments made after it are left: no synchronize begun before covers them).
  /// Called with the lock held; the segments are then the caller's to return.
  void take_free_segments(stream_pool* only, std::size_t below, std::vector<std::unique_ptr<segment>>& out,
                          std::uint64_t freed_by = 0) noexcept;
  /// After a free left one of `pool`'s segments wholly free: moves into `out`
  /// its wholly free segments, largest first, while the idle bytes of all
  /// streams pass what is kept at frees. Called with the lock held.
  void take_idle_excess(stream_pool& pool, std::vector<std::unique_ptr<segment>>& out) noexcept;
  /// The wholly free bytes kept at frees, with `max_idle_bytes` set: at least half of `in_use_peak`.
  [[nodiscard]] std::size_t idle_allowance(std::size_t in_use_peak) const noexcept;
  /// Frees `taken` upstream on `stream` and empties it. Called without the lock.
  void return_upstream(std::vector<std::unique_ptr<segment>>& taken, stream_ref stream) noexcept;
  /// Gives back upstream, on `stream`, every wholly free segment: `own`'s at
  /// once (its stream orders the frees), then, after synchronizing every device
  /// when other streams hold segments or pending blocks, the pending blocks
  /// and every segment whose frees the wait covered. Called without the lock.
  /// \throws cuda_error if the synchronize fails, having given back `own`'s.
  void reclaim_all(stream_pool* own, stream_ref stream);
  [[nodiscard]] static std::set<block*, by_size>& free_set(stream_pool& pool, bool small) noexcept {
    return small ? pool.small_free : pool.large_free;
  }

  coalescing_options options_;
  detail::stream_ordering& ordering_;
  mutable std::mutex mutex_;
  std::map<stream_key, std::unique_ptr<stream_pool>> pools_;
  segment_map segments_;  // by base
  std::unordered_map<const std::byte*, block*> out_;  // blocks handed out, by pointer
  std::unordered_set<const void*> graph_blocks_;  // allocated upstream during a capture
  std::vector<pending_free> pending_;  // in the order of the frees
  std::vector<block*> retired_;  // out of use until destruction
  std::uint64_t segments_made_ = 0;
  std::uint64_t frees_in_order_ = 0;  // frees on a block's own stream and segments made, so far
  std::size_t recent_used_peak_ = 0;  // the most in use since idle segments were last given back
  std::size_t idle_bytes_ = 0;  // of every stream's wholly free segments
  coalescing_statistics counts_;
};

}  // namespace cudapmr
