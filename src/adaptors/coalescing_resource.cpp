// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/adaptors/coalescing_resource.hpp"
#include "cudapmr/detail/reclaiming_allocation.hpp"

#include "cudapmr/error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <functional>
#include <iterator>
#include <stdexcept>
#include <tuple>
#include <utility>

namespace cudapmr {
namespace {

constexpr std::size_t largest_option = std::size_t{1} << 48;

coalescing_options validated(coalescing_options options) {
  if (options.small_request == 0 || options.small_request > largest_option)
    throw std::invalid_argument(fmt::format("coalescing_options::small_request of {} bytes is not in [1, 2^48]",
                                            options.small_request));
  if (options.small_segment < options.small_request || options.small_segment > largest_option)
    throw std::invalid_argument(
        fmt::format("coalescing_options::small_segment of {} bytes is below small_request ({} bytes) or past 2^48",
                    options.small_segment, options.small_request));
  if (!std::has_single_bit(options.segment_granularity) || options.segment_granularity > largest_option)
    throw std::invalid_argument(fmt::format(
        "coalescing_options::segment_granularity of {} bytes is not a power of two up to 2^48", options.segment_granularity));
  if (options.shared_large_segment > largest_option)
    throw std::invalid_argument(fmt::format("coalescing_options::shared_large_segment of {} bytes is past 2^48",
                                            options.shared_large_segment));
  options.small_segment = coalescing_resource::block_bytes(options.small_segment);
  return options;
}

}  // namespace

coalescing_resource::segment::segment(std::byte* start, std::size_t bytes, bool of_small_requests, stream_pool* owner)
    : base(start), size(bytes), small(of_small_requests), pool(owner), first(new block{start, bytes, this, nullptr, nullptr, true}) {}

bool coalescing_resource::by_size::operator()(const block* a, const block* b) const noexcept {
  // A probe for lower_bound has no segment: it sorts before every block of its size.
  const std::uint64_t a_sequence = a->owner == nullptr ? 0 : a->owner->sequence + 1;
  const std::uint64_t b_sequence = b->owner == nullptr ? 0 : b->owner->sequence + 1;
  return std::tie(a->size, a_sequence, a->pointer) < std::tie(b->size, b_sequence, b->pointer);
}

coalescing_resource::segment::~segment() {
  for (block* each = first; each != nullptr;) {
    block* next = each->next;
    delete each;
    each = next;
  }
}

coalescing_resource::coalescing_resource(stream_ordered_resource& upstream, coalescing_options options)
    : coalescing_resource(upstream, options, detail::stream_ordering_for(upstream.kind())) {}

coalescing_resource::coalescing_resource(stream_ordered_resource& upstream, coalescing_options options,
                                         detail::stream_ordering& ordering)
    : resource_adaptor(upstream), options_(validated(options)), ordering_(ordering) {}

coalescing_resource::~coalescing_resource() {
  if (!retired_.empty()) {
    try {
      // The resource goes away: its memory may not be used after it, graphs included.
      ordering_.synchronize_all_devices();
      // make_free may retire a block again (no memory for a free set): it goes
      // to a fresh list, not the one being walked.
      std::vector<block*> retired;
      retired.swap(retired_);
      for (block* each : retired) make_free(each);
    } catch (...) {  // not idle: the retired blocks' segments stay with the upstream
    }
  }
  try {
    release();
  } catch (...) {  // a destructor never throws; the segments stay with the upstream
  }
  for (const pending_free& pending : pending_) ordering_.recycle(pending.event);
  for (const auto& [base, held] : segments_) forget_idle_event(*held);
}

coalescing_resource::stream_pool& coalescing_resource::pool_of(stream_ref stream) {
  const stream_key key = key_of(stream);
  auto& pool = pools_[key];
  if (!pool) pool = std::make_unique<stream_pool>(key);
  return *pool;
}

coalescing_resource::stream_pool* coalescing_resource::existing_pool(stream_ref stream) const {
  const std::lock_guard lock(mutex_);
  const auto found = pools_.find(key_of(stream));
  return found == pools_.end() ? nullptr : found->second.get();
}

std::size_t coalescing_resource::segment_bytes(std::size_t size, bool small) const noexcept {
  if (small) return options_.small_segment;
  // The most lately in use, never below what is in use now (hand_out keeps it so).
  const std::size_t wanted = std::max(size, std::min(options_.shared_large_segment, recent_used_peak_ / 32));
  const std::size_t granularity = options_.segment_granularity;
  return (wanted + granularity - 1) / granularity * granularity;
}

coalescing_resource::block* coalescing_resource::take_best_fit(stream_pool& pool, std::size_t size, bool small) {
  auto& free_blocks = free_set(pool, small);
  block probe{nullptr, size, nullptr, nullptr, nullptr, true};
  const auto found = free_blocks.lower_bound(&probe);
  if (found == free_blocks.end()) return nullptr;
  block* taken = *found;
  const bool was_idle = taken->owner->wholly_free();
  const std::size_t rest = taken->size - size;
  // A large block keeps a remainder only past the small requests' bound, as
  // PyTorch's does: slivers of large segments would serve nothing.
  if (small ? rest >= block_rounding : rest > options_.small_request) {
    auto* tail = new block{taken->pointer + size, rest, taken->owner, taken, taken->next, true};
    try {
      free_blocks.insert(tail);
    } catch (...) {
      delete tail;
      throw;
    }
    free_blocks.erase(found);
    if (taken->next != nullptr) taken->next->previous = tail;
    taken->next = tail;
    taken->size = size;
  } else {
    free_blocks.erase(found);
  }
  forget_idle_event(*taken->owner);
  if (was_idle) {
    pool.idle_bytes -= taken->owner->size;
    idle_bytes_ -= taken->owner->size;
  }
  taken->free = false;
  return taken;
}

void coalescing_resource::forget_idle_event(segment& held) noexcept {
  if (held.idle_event == nullptr) return;
  ordering_.recycle(held.idle_event);
  held.idle_event = nullptr;
}

coalescing_resource::segment* coalescing_resource::adopt_idle_segment(stream_pool& pool, std::size_t bytes,
                                                                      bool small, stream_ref stream) noexcept {
  // At most twice the request (past a small request's bound): a stream that
  // takes over a huge segment for a small tensor would leave its owner short.
  const std::size_t largest = std::max(2 * bytes, bytes + options_.small_request);
  if (pools_.size() < 2) return nullptr;  // no other stream: no segment to walk for
  segment* best = nullptr;
  for (const auto& [base, held] : segments_) {
    if (held->pool == &pool || held->small != small || held->idle_event == nullptr || held->size < bytes ||
        held->size > largest)
      continue;
    if (best == nullptr || held->size < best->size || (held->size == best->size && held->sequence < best->sequence))
      best = held.get();
  }
  if (best == nullptr) return nullptr;
  if (!ordering_.has_completed(best->idle_event) && !ordering_.make_wait(stream, best->idle_event)) return nullptr;
  forget_idle_event(*best);
  auto& from = free_set(*best->pool, small);
  auto node = from.extract(best->first);
  best->pool->idle_bytes -= best->size;
  best->pool = &pool;
  pool.idle_bytes += best->size;
  free_set(pool, small).insert(std::move(node));  // the node moves: no allocation
  ++counts_.segments_adopted;
  return best;
}

void* coalescing_resource::hand_out(block* taken) {
  try {
    out_.emplace(taken->pointer, taken);
  } catch (...) {
    make_free(taken);
    // Its idle event went when the block was taken: never known idle, the
    // segment goes back only in its stream's order or after a synchronize.
    taken->owner->last_free = ++frees_in_order_;
    throw;
  }
  counts_.used_bytes += taken->size;
  counts_.used_peak = std::max(counts_.used_peak, counts_.used_bytes);
  recent_used_peak_ = std::max(recent_used_peak_, counts_.used_bytes);
  ++counts_.blocks_handed_out;
  return taken->pointer;
}

void* coalescing_resource::allocate_from_new_segment(stream_pool& pool, std::size_t size, bool small,
                                                     std::size_t requested, std::size_t alignment, stream_ref stream) {
  // About to hold more than ever: this stream's wholly free segments, all too
  // small for the request, go back first (in its order), so a growing working
  // set leaves no trail of outgrown segments.
  std::vector<std::unique_ptr<segment>> outgrown;
  std::size_t bytes = 0;
  {
    const std::lock_guard lock(mutex_);
    bytes = segment_bytes(size, small);
    // The same where the idle segments would pass what is kept at frees: those
    // too small for this request serve only smaller ones, which a growing working set will not make.
    const bool past_peak = counts_.reserved_bytes + bytes > counts_.reserved_peak;
    const bool over_idle = options_.max_idle_bytes &&
                           idle_bytes_ > idle_allowance(std::max(recent_used_peak_, counts_.used_bytes + size));
    if (past_peak || over_idle) take_free_segments(&pool, bytes, outgrown);
  }
  return_upstream(outgrown, stream);
  // What this resource holds free may be what the upstream lacks: first this
  // stream's free segments, in its order; then, with every device idle, all,
  // after which a block another stream freed may serve the request itself.
  block* reclaimed = nullptr;
  void* base = nullptr;
  try {
    base = detail::allocate_reclaiming(
        upstream_resource(), bytes, block_alignment, stream,
        [&] {
          {
            const std::lock_guard lock(mutex_);
            take_free_segments(&pool, std::numeric_limits<std::size_t>::max(), outgrown);
          }
          return_upstream(outgrown, stream);
        },
        [&]() -> void* {
          reclaim_all(&pool, stream);
          const std::lock_guard lock(mutex_);
          reclaimed = take_best_fit(pool, size, small);
          return reclaimed != nullptr ? reclaimed->pointer : nullptr;
        });
  } catch (const out_of_memory& error) {
    throw out_of_memory(requested, alignment, description(),
                        fmt::format("the upstream refused a segment of {} bytes", bytes), error);
  }
  if (reclaimed != nullptr) {  // out of the free set already: no one else can take it meanwhile
    const std::lock_guard lock(mutex_);
    return hand_out(reclaimed);
  }
  std::unique_lock lock(mutex_);
  segment* added = nullptr;
  try {
    segments_.reserve(segments_.size() + 1);  // so that the emplace below cannot rehash and throw
    auto owned = std::make_unique<segment>(static_cast<std::byte*>(base), bytes, small, &pool);
    added = owned.get();
    added->sequence = segments_made_++;
    // Memory handed out in the stream's order: no synchronize begun before now covers its uses (reclaim_all).
    added->made = ++frees_in_order_;
    // The map owns the segment first: if the free set then cannot take its
    // block, erasing it from the map (which cannot throw) leaves nothing behind.
    segments_.emplace(added->base, std::move(owned));
    try {
      free_set(pool, small).insert(added->first);
    } catch (...) {
      segments_.erase(static_cast<const std::byte*>(base));
      throw;
    }
  } catch (...) {
    lock.unlock();
    upstream_resource().deallocate_async(base, bytes, block_alignment, stream);
    throw;
  }
  pool.idle_bytes += bytes;  // wholly free until the block below is taken from it
  idle_bytes_ += bytes;
  counts_.reserved_bytes += bytes;
  counts_.reserved_peak = std::max(counts_.reserved_peak, counts_.reserved_bytes);
  ++counts_.segment_allocations;
  // The new segment fits; another free meanwhile may fit better.
  block* taken = nullptr;
  try {
    taken = take_best_fit(pool, size, small);
  } catch (...) {  // no memory to split a block: the segment, unused, is never known idle
    added->last_free = ++frees_in_order_;
    throw;
  }
  // Unused, it goes back (or to another stream) once the stream's order reaches this event.
  if (added->wholly_free()) added->idle_event = ordering_.record(stream);
  return hand_out(taken);
}

void* coalescing_resource::do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) {
  if (!is_carved(bytes, alignment)) return upstream_resource().allocate_async(bytes, alignment, stream);
  if (is_captured(stream)) {
    // A graph node, whose address the graph keeps at every launch: it goes
    // back upstream at its free, never into a segment.
    void* p = upstream_resource().allocate_async(bytes, alignment, stream);
    try {
      const std::lock_guard lock(mutex_);
      graph_blocks_.insert(p);
    } catch (...) {
      upstream_resource().deallocate_async(p, bytes, alignment, stream);
      throw;
    }
    return p;
  }
  const std::size_t size = block_bytes(bytes);
  const bool small = size <= options_.small_request;
  stream_pool* pool = nullptr;
  {
    const std::lock_guard lock(mutex_);
    collect_pending(false);
    pool = &pool_of(stream);
    if (block* taken = take_best_fit(*pool, size, small)) return hand_out(taken);
    // Another stream's idle segment before new memory. Small segments are all
    // alike; a large one may be larger than needed, and is split as any block.
    if (adopt_idle_segment(*pool, small ? options_.small_segment : size, small, stream) != nullptr)
      return hand_out(take_best_fit(*pool, size, small));
  }
  // Upstream calls take no lock of this resource: a callback below it may free through it.
  return allocate_from_new_segment(*pool, size, small, bytes, alignment, stream);
}

void coalescing_resource::do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment,
                                              stream_ref stream) noexcept {
  if (!is_carved(bytes, alignment)) return upstream_resource().deallocate_async(p, bytes, alignment, stream);
  const bool captured = is_captured(stream);
  std::unique_lock lock(mutex_);
  const auto found = out_.find(static_cast<const std::byte*>(p));
  if (found == out_.end()) {
    // A graph's block goes back upstream. Any other pointer is none of ours or
    // freed twice: handed upstream it could free a segment still in use.
    if (graph_blocks_.erase(p) == 0) return;
    lock.unlock();
    return upstream_resource().deallocate_async(p, bytes, alignment, stream);
  }
  block* freed = found->second;
  out_.erase(found);
  counts_.used_bytes -= freed->size;
  if (captured) {
    retire(freed);  // the graph may touch it at any launch
    return;
  }
  const stream_key freeing = key_of(stream);
  // Blocks freed on other streams whose work has completed count as free
  // first: a free may be the last call for a while, and what it leaves idle
  // past the bound goes back now, not at a later allocation.
  if (options_.max_idle_bytes) collect_pending(false);
  std::vector<std::unique_ptr<segment>> idle;
  if (freed->owner->pool->key == freeing) {
    segment& held = *freed->owner;
    make_free(freed);  // its own stream orders every later use after this free
    held.last_free = ++frees_in_order_;
    if (options_.max_idle_bytes) take_idle_excess(*held.pool, idle);
    const bool kept = std::none_of(idle.begin(), idle.end(), [&](const auto& each) { return each.get() == &held; });
    if (kept && held.wholly_free()) held.idle_event = ordering_.record(stream);
  } else {
    // Another stream's free: the block's own stream may reuse it only once the
    // work queued before the free has completed.
    const detail::ordering_event event = ordering_.record(stream);
    if (event == nullptr) {
      retire(freed);  // no way to order its reuse: kept out rather than risk a race
      return;
    }
    try {
      pending_.push_back({freed, event, freeing});
    } catch (...) {
      ordering_.recycle(event);
      retire(freed);
    }
    // The freeing stream orders its own pool's idle segments: those past the bound go back on it.
    if (options_.max_idle_bytes)
      if (const auto own = pools_.find(freeing); own != pools_.end()) take_idle_excess(*own->second, idle);
  }
  if (idle.empty()) return;
  lock.unlock();
  return_upstream(idle, stream);
}

void coalescing_resource::retire(block* freed) noexcept {
  ++counts_.retired_blocks;
  try {
    retired_.push_back(freed);
  } catch (...) {  // not even kept for the destructor: its segment stays with the upstream
  }
}

void coalescing_resource::make_free(block* freed) noexcept {
  auto& free_blocks = free_set(*freed->owner->pool, freed->owner->small);
  freed->free = true;
  // Absorbs the block after `into` into it, out of the free set first (its size is the set's key).
  const auto absorb_next = [&](block* into) noexcept {
    block* next = into->next;
    free_blocks.erase(next);
    into->size += next->size;
    into->next = next->next;
    if (next->next != nullptr) next->next->previous = into;
    delete next;
  };
  if (freed->next != nullptr && freed->next->free) absorb_next(freed);
  if (freed->previous != nullptr && freed->previous->free) {
    freed = freed->previous;
    free_blocks.erase(freed);
    absorb_next(freed);
  }
  try {
    free_blocks.insert(freed);
  } catch (...) {  // no memory for the set: the block stays out of use
    freed->free = false;
    retire(freed);
    return;
  }
  if (freed->owner->wholly_free()) {
    freed->owner->pool->idle_bytes += freed->owner->size;
    idle_bytes_ += freed->owner->size;
  }
}

void coalescing_resource::collect_pending(bool all_completed) noexcept {
  // Streams seen with an incomplete event; past a handful, the others are asked each time.
  std::array<stream_key, 8> stalled{};
  std::size_t stalled_count = 0;
  const auto is_stalled = [&](const stream_key& stream) noexcept {
    return std::find(stalled.begin(), stalled.begin() + static_cast<std::ptrdiff_t>(stalled_count), stream) !=
           stalled.begin() + static_cast<std::ptrdiff_t>(stalled_count);
  };
  std::size_t kept = 0;
  for (const pending_free& pending : pending_) {
    const bool behind = !all_completed && is_stalled(pending.stream);
    if (behind || (!all_completed && !ordering_.has_completed(pending.event))) {
      if (!behind && stalled_count < stalled.size()) stalled[stalled_count++] = pending.stream;
      pending_[kept++] = pending;  // later frees of a stalled stream stay behind its first
      continue;
    }
    ordering_.recycle(pending.event);
    make_free(pending.freed);
  }
  pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(kept), pending_.end());
}

bool coalescing_resource::take_out(segment_map::iterator each, std::vector<std::unique_ptr<segment>>& out) noexcept {
  segment& held = *each->second;
  try {
    out.push_back(std::move(each->second));
  } catch (...) {  // no memory for the list: the segment stays
    return false;
  }
  free_set(*held.pool, held.small).erase(held.first);
  held.pool->idle_bytes -= held.size;
  idle_bytes_ -= held.size;
  forget_idle_event(held);
  counts_.reserved_bytes -= held.size;
  ++counts_.segment_frees;
  segments_.erase(each);
  return true;
}

void coalescing_resource::take_free_segments(stream_pool* only, std::size_t below,
                                             std::vector<std::unique_ptr<segment>>& out,
                                             std::uint64_t freed_by) noexcept {
  for (auto each = segments_.begin(); each != segments_.end();) {
    const segment& held = *each->second;
    const bool ordered = held.pool == only || (only == nullptr && held.last_free <= freed_by && held.made <= freed_by);
    const auto next = std::next(each);
    if (held.wholly_free() && held.size < below && ordered) take_out(each, out);
    each = next;
  }
}

void coalescing_resource::take_idle_excess(stream_pool& pool, std::vector<std::unique_ptr<segment>>& out) noexcept {
  // Only the stream's own idle segments can go back in its order: they are what counts.
  const std::size_t allowed = idle_allowance(recent_used_peak_);
  if (idle_bytes_ <= allowed || pool.idle_bytes == 0) return;  // the common case: no walk over the segments
  std::vector<std::pair<std::size_t, const std::byte*>> idle;  // (size, base), largest first below
  try {
    for (const auto& [base, held] : segments_)
      if (held->pool == &pool && held->wholly_free()) idle.emplace_back(held->size, base);
  } catch (...) {  // no memory for the list: nothing goes back this time
    return;
  }
  std::sort(idle.begin(), idle.end(), std::greater<>{});
  for (const auto& each : idle)
    if (idle_bytes_ <= allowed || !take_out(segments_.find(each.second), out)) return;
}

void coalescing_resource::return_upstream(std::vector<std::unique_ptr<segment>>& taken, stream_ref stream) noexcept {
  for (const auto& held : taken) upstream_resource().deallocate_async(held->base, held->size, block_alignment, stream);
  taken.clear();
}

void coalescing_resource::reclaim_all(stream_pool* own, stream_ref stream) {
  std::vector<std::unique_ptr<segment>> taken;
  std::vector<pending_free> completed;
  std::uint64_t freed_by = 0;
  bool others = false;
  {
    const std::lock_guard lock(mutex_);
    if (own != nullptr) take_free_segments(own, std::numeric_limits<std::size_t>::max(), taken);
    others = !pending_.empty() || std::any_of(segments_.begin(), segments_.end(), [&](const auto& each) {
               return each.second->pool != own && each.second->wholly_free();
             });
    recent_used_peak_ = counts_.used_bytes;
    // What the wait below covers, taken before it: frees made meanwhile stay.
    freed_by = frees_in_order_;
    completed.swap(pending_);
  }
  // The stream orders its own segments' frees: they need no wait.
  return_upstream(taken, stream);
  if (!others) return;
  try {
    ordering_.synchronize_all_devices();
  } catch (...) {
    const std::lock_guard lock(mutex_);
    // Still pending, ahead of any made meanwhile (a stream's events complete in order).
    try {
      completed.insert(completed.end(), pending_.begin(), pending_.end());
      pending_.swap(completed);
    } catch (...) {  // no memory to keep them waiting: out of use instead
      for (const pending_free& pending : completed) {
        ordering_.recycle(pending.event);
        retire(pending.freed);
      }
    }
    throw;
  }
  {
    const std::lock_guard lock(mutex_);
    for (const pending_free& pending : completed) {
      ordering_.recycle(pending.event);
      make_free(pending.freed);
    }
    take_free_segments(nullptr, std::numeric_limits<std::size_t>::max(), taken, freed_by);
  }
  return_upstream(taken, stream);
}

void coalescing_resource::do_trim(stream_ref stream) {
  reclaim_all(existing_pool(stream), stream);
  upstream_resource().trim(stream);
}

std::size_t coalescing_resource::idle_allowance(std::size_t in_use_peak) const noexcept {
  return std::max(*options_.max_idle_bytes, in_use_peak / 2);
}

std::size_t coalescing_resource::release_idle(std::size_t keep) noexcept {
  if (is_captured(own_bound_stream())) return 0;  // a free there would become a node of someone's graph
  std::vector<std::unique_ptr<segment>> taken;
  {
    const std::lock_guard lock(mutex_);
    collect_pending(false);
    recent_used_peak_ = counts_.used_bytes;
    std::vector<std::pair<std::size_t, const std::byte*>> ready;  // (size, base), largest first below
    std::size_t idle_bytes = 0;
    try {
      for (const auto& [base, held] : segments_) {
        if (!held->wholly_free()) continue;
        idle_bytes += held->size;
        // Left wholly free by its own stream: its event covers every use. With
        // no event, only a segment never freed on its own stream is known idle
        // (its blocks came back through completed events).
        if (held->idle_event != nullptr ? ordering_.has_completed(held->idle_event) : held->last_free == 0)
          ready.emplace_back(held->size, base);
      }
    } catch (...) {  // no memory for the list: nothing goes back this time
      return 0;
    }
    std::sort(ready.begin(), ready.end(), std::greater<>{});
    for (const auto& [bytes, base] : ready) {
      if (idle_bytes <= keep || !take_out(segments_.find(base), taken)) break;
      idle_bytes -= bytes;
    }
  }
  std::size_t returned = 0;
  for (const auto& held : taken) returned += held->size;
  return_upstream(taken, own_bound_stream());
  return returned;
}

bool coalescing_resource::has_frees_waiting_on_work() const noexcept {
  const std::lock_guard lock(mutex_);
  if (std::any_of(pending_.begin(), pending_.end(),
                  [&](const pending_free& pending) { return !ordering_.has_completed(pending.event); }))
    return true;
  return std::any_of(segments_.begin(), segments_.end(), [&](const auto& each) {
    const segment& held = *each.second;
    return held.wholly_free() && held.idle_event != nullptr && !ordering_.has_completed(held.idle_event);
  });
}

void coalescing_resource::release() { reclaim_all(existing_pool(own_bound_stream()), own_bound_stream()); }

void coalescing_resource::do_report(resource_state& state) const {
  const std::lock_guard lock(mutex_);
  state.used_bytes = counts_.used_bytes;
  state.peak_used_bytes = counts_.used_peak;
  state.reserved_bytes = counts_.reserved_bytes;
  state.peak_reserved_bytes = counts_.reserved_peak;
  state.cached_bytes = counts_.reserved_bytes - counts_.used_bytes;  // free in segments, pending frees included
  std::size_t largest = 0;
  std::size_t releasable = 0;
  for (const auto& [key, pool] : pools_) {
    std::size_t free_bytes = 0;
    for (const auto* free_blocks : {&pool->small_free, &pool->large_free})
      for (const block* each : *free_blocks) {
        free_bytes += each->size;
        largest = std::max(largest, each->size);
      }
    if (free_bytes != 0) state.cached_bytes_by_stream.push_back({stream_ref(key.stream), free_bytes});
  }
  for (const auto& [base, held] : segments_)
    if (held->wholly_free()) releasable += held->size;
  state.largest_free_block = largest;
  state.releasable_bytes = releasable;
}

coalescing_statistics coalescing_resource::statistics() const {
  const std::lock_guard lock(mutex_);
  coalescing_statistics result = counts_;
  result.segments = segments_.size();
  result.pending_blocks = pending_.size();
  result.streams = pools_.size();
  return result;
}

}  // namespace cudapmr
