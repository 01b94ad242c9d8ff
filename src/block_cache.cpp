// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/detail/block_cache.hpp"

#include "cudapmr/detail/thread_ordinal.hpp"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string_view>
#include <utility>

namespace cudapmr::detail {

namespace {

/// The calling thread's shard among `count`.
std::size_t this_thread_shard(std::size_t count) noexcept {
  return static_cast<std::size_t>(thread_ordinal() % count);
}

/// Seals made for a stream that missed, without its taking a sealed block,
/// before its request lapses.
constexpr std::uint32_t unanswered_seals_limit = 16;
/// A stream's first frees are sealed: a stream made per request frees once and
/// is gone, and its block must reach the next one.
constexpr std::uint32_t young_stream_frees = 2;
/// The default stream share splits what is live among the streams that freed
/// in this window or the last: a stream quiet for two windows no longer counts.
constexpr std::int64_t freeing_window_ns = 1'000'000'000;
/// The least default share: below it a stream's frees never look at the share.
constexpr std::size_t least_default_share = std::size_t{4} << 20;
/// Bytes a lock holder counts before it adds them to the shared total: a
/// 64th of the budget, between 64 KiB and 4 MiB.
std::int64_t flush_bytes_for(std::size_t max_cached_bytes) noexcept {
  return static_cast<std::int64_t>(std::clamp(max_cached_bytes / 64, std::size_t{64} << 10, std::size_t{4} << 20));
}

bool is_default_stream(cudaStream_t stream) noexcept {
  return stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread;
}

/// Nanoseconds of the steady clock.
std::int64_t clock_ticks() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::uint64_t next_cache_identity() noexcept {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

bool caching_disabled() noexcept {
  const char* value = std::getenv("CUDAPMR_NO_CACHING");
  return value != nullptr && std::string_view(value) == "1";
}

// ---- free_lists ---------------------------------------------------------------

void* free_lists::pop(std::size_t size_class) noexcept {
  std::vector<void*>& list = lists_[size_class].blocks;
  if (list.empty()) return nullptr;
  void* pointer = list.back();
  list.pop_back();
  bytes_ -= size_class_bytes(size_class);
  --blocks_;
  return pointer;
}

bool free_lists::push(std::size_t size_class, void* pointer) noexcept {
  auto& [list, kept_room] = lists_[size_class];
  if (list.size() + kept_room == list.capacity()) [[unlikely]] {
    try {
      list.reserve(std::max(list.capacity() + 1, 2 * list.capacity()));
    } catch (...) {
      return false;
    }
  }
  list.push_back(pointer);  // within capacity: no allocation
  bytes_ += size_class_bytes(size_class);
  ++blocks_;
  return true;
}

void free_lists::put_back(std::size_t size_class, void* pointer) noexcept {
  auto& [list, kept_room] = lists_[size_class];
  assert(kept_room > 0 && "put back a block that take_all_keeping_room did not take");
  --kept_room;
  list.push_back(pointer);  // into the room kept for it: no allocation
  bytes_ += size_class_bytes(size_class);
  ++blocks_;
}

void free_lists::let_go(std::size_t size_class) noexcept {
  assert(lists_[size_class].kept_room > 0 && "let go of a block that take_all_keeping_room did not take");
  --lists_[size_class].kept_room;
}

void free_lists::drain_into(std::vector<cached_block>& out) {
  if (blocks_ == 0) return;
  out.reserve(out.size() + blocks_);  // room first: no block leaves unless it reaches `out`
  for (std::size_t size_class = 0; size_class < lists_.size(); ++size_class) {
    for (void* pointer : lists_[size_class].blocks) out.push_back({pointer, size_class});
    lists_[size_class].blocks.clear();
  }
  bytes_ = 0;
  blocks_ = 0;
}

void free_lists::take_all_keeping_room(std::vector<cached_block>& out) {
  if (blocks_ == 0) return;
  out.reserve(out.size() + blocks_);  // before any room is kept: a throw leaves the lists as they were
  for (class_list& each : lists_) each.kept_room += each.blocks.size();  // clear keeps the capacity
  drain_into(out);
}

std::size_t free_lists::drain_bytes_into(std::vector<evicted_block>& out, std::size_t bytes,
                                         stream_ref stream) noexcept {
  std::size_t moved = 0;
  try {
    for (std::size_t size_class = lists_.size(); size_class-- > 0 && moved < bytes && blocks_ != 0;) {
      std::vector<void*>& list = lists_[size_class].blocks;
      while (!list.empty() && moved < bytes) {
        out.push_back({list.back(), size_class, stream});  // first: a block leaves only once it is in `out`
        list.pop_back();
        moved += size_class_bytes(size_class);
        bytes_ -= size_class_bytes(size_class);
        --blocks_;
      }
    }
  } catch (...) {  // no memory for `out`: the rest stay
  }
  return moved;
}

// ---- block_cache ----------------------------------------------------------------

namespace {

/// Room in `list` for `more` elements, or false where the host has no memory
/// for it: an eviction moves a block only where it has room to put it.
bool has_room(std::vector<evicted_block>& list, std::size_t more) noexcept {
  try {
    list.reserve(list.size() + more);
    return true;
  } catch (...) {
    return false;
  }
}

/// The entry this thread used last, and whose it was.
struct entry_memo {
  std::uint64_t cache = 0;
  cudaStream_t stream = nullptr;
  void* found = nullptr;
};
thread_local entry_memo last_entry;

}  // namespace

block_cache::block_cache(stream_ordering& ordering, std::size_t max_cached_bytes,
                         std::chrono::nanoseconds shrink_interval, std::optional<double> per_live,
                         std::optional<std::size_t> stream_share)
    : ordering_(ordering),
      // The counts are signed: a budget past 2^63 (SIZE_MAX for "unbounded") is 2^63 - 1.
      max_bytes_(std::min<std::size_t>(max_cached_bytes, std::numeric_limits<std::int64_t>::max())),
      shrink_interval_(shrink_interval.count()),
      per_live_(per_live),
      stream_share_(stream_share),
      least_share_(stream_share.value_or(std::min(least_default_share, max_cached_bytes / 8))),
      floor_bytes_(static_cast<std::int64_t>(std::min(max_cached_bytes / 64, std::size_t{16} << 20))),
      flush_bytes_(flush_bytes_for(max_cached_bytes)),
      identity_(next_cache_identity()),
      keep_nothing_(caching_disabled()),
      window_start_(clock_ticks()) {}

block_cache::~block_cache() {
  // Blocks were drained by the owner; events of sealed blocks left behind (a
  // failed drain) are recycled, the blocks stay with their upstream.
  const std::lock_guard lock(sealed_mutex_);
  for (auto& list : sealed_)
    for (const sealed_block& block : list) release_reference(block.event);
}

block_cache::stream_key block_cache::key_of(stream_ref stream, stream_ordering& ordering) noexcept {
  const cudaStream_t handle = stream.get();
  if (!is_default_stream(handle)) return {handle, 0, -1};
  return {handle, handle == cudaStreamPerThread ? thread_ordinal() : 0, ordering.current_device()};
}

block_cache::stream_entry* block_cache::entry_of(stream_ref stream) noexcept {
  const cudaStream_t handle = stream.get();
  // The memo holds only streams that are not default streams: those name one
  // stream whatever the thread and the current device.
  if (last_entry.cache == identity_ && last_entry.stream == handle && handle != nullptr)
    return static_cast<stream_entry*>(last_entry.found);

  const stream_key key = key_of(stream, ordering_);
  // Stream handles are pointers to aligned objects: drop the low bits, mix the rest.
  auto bits = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(key.stream) >> 4);
  bits ^= key.thread;
  bits ^= static_cast<std::uint64_t>(static_cast<std::uint32_t>(key.device)) << 32;
  bits *= 0x9e3779b97f4a7c15ull;
  entry_shard& home = entries_[static_cast<std::size_t>(bits >> 58)];  // the top 6 bits: 64 shards
  stream_entry* found = nullptr;
  {
    const std::lock_guard lock(home.mutex);
    for (const auto& each : home.entries)
      if (each->key == key) found = each.get();
    if (found == nullptr) {
      try {
        found = home.entries.emplace_back(std::make_unique<stream_entry>(key)).get();
      } catch (...) {
        return nullptr;
      }
    }
  }
  if (!is_default_stream(handle)) last_entry = {identity_, handle, found};
  return found;
}

std::size_t block_cache::share_now() const noexcept {
  if (stream_share_) return *stream_share_;
  const auto peak = static_cast<std::size_t>(std::max<std::int64_t>(0, recent_live_peak_.load(std::memory_order_relaxed)));
  const std::size_t streams = std::max<std::size_t>({1, freeing_streams_[0].load(std::memory_order_relaxed),
                                                     freeing_streams_[1].load(std::memory_order_relaxed)});
  return std::clamp(peak / 2 / streams, least_share_, max_bytes_ / 8);
}

void block_cache::note_freeing(stream_entry& entry) noexcept {
  // A stream's first free in a window and every 64th look at the clock: a
  // new window starts its count from nothing. One thread at a time starts it.
  std::uint32_t window = window_.load(std::memory_order_acquire);
  if ((entry.window != window || entry.frees % 64 == 0) &&
      clock_ticks() - window_start_.load(std::memory_order_relaxed) >= freeing_window_ns) {
    std::unique_lock lock(window_mutex_, std::try_to_lock);
    if (lock.owns_lock()) {
      const std::int64_t now = clock_ticks();
      if (now - window_start_.load(std::memory_order_relaxed) >= freeing_window_ns) {
        window_start_.store(now, std::memory_order_relaxed);
        const std::uint32_t next = window_.load(std::memory_order_relaxed) + 1;
        freeing_streams_[next % 2].store(0, std::memory_order_relaxed);  // cleared before any thread counts in it
        window_.store(next, std::memory_order_release);
      }
      window = window_.load(std::memory_order_acquire);
    }
  }
  if (entry.window != window) {
    entry.window = window;
    freeing_streams_[window % 2].fetch_add(1, std::memory_order_relaxed);
  }
}

void block_cache::settle(std::int64_t& unflushed, std::int64_t change) noexcept {
  approximate_bytes_.fetch_add(std::exchange(unflushed, 0) + change, std::memory_order_relaxed);
}

void block_cache::account(std::int64_t& unflushed, std::int64_t change) noexcept {
  unflushed += change;
  if (unflushed >= flush_bytes_ || unflushed <= -flush_bytes_) {
    approximate_bytes_.fetch_add(unflushed, std::memory_order_relaxed);
    unflushed = 0;
  }
}

block_cache::give_outcome block_cache::keeps(std::size_t size_class, std::int64_t unflushed) noexcept {
  if (keep_nothing_) return refuse(size_class);
  const std::int64_t cached = std::max<std::int64_t>(0, approximate_bytes_.load(std::memory_order_relaxed) + unflushed);
  const std::int64_t live = held_.load(std::memory_order_relaxed) - cached;  // the block included
  const std::int64_t peak = note_live(live);
  const auto incoming = static_cast<std::int64_t>(size_class_bytes(size_class));
  const auto budget = static_cast<std::int64_t>(max_bytes_);
  if (cached + incoming > budget) return refuse(size_class);
  // excess(0)'s line, once the block moves from live to cached.
  return cached + incoming > allowed_cached(live - incoming, peak, budget) ? give_outcome::kept_over_live
                                                                           : give_outcome::kept;
}

std::int64_t block_cache::note_live(std::int64_t live) noexcept {
  // Follows a rise at once; once what is live has stayed an eighth below it
  // for a shrink interval, falls by an eighth per interval (half in some
  // five), looked at every 32nd such free of this cache. So a working set that
  // dips and comes back within the interval finds its blocks again, however
  // many frees it makes or however long it stays near its peak, and a program
  // that goes on with less takes the cache down with it. Written only on such
  // changes, so threads that reuse their own frees do not share a cache line;
  // a racing write may lose a rise or a fall, which costs one trim more or less.
  const std::int64_t peak = recent_live_peak_.load(std::memory_order_relaxed);
  if (live >= peak - peak / 8) {  // at or near the peak: no dip under way
    if (below_since_.load(std::memory_order_relaxed) != 0) below_since_.store(0, std::memory_order_relaxed);
    if (live <= peak) return peak;
    recent_live_peak_.store(live, std::memory_order_relaxed);
    return live;
  }
  if (frees_below_.fetch_add(1, std::memory_order_relaxed) % 32 != 31) return peak;
  const std::int64_t now = clock_ticks();
  std::int64_t since = below_since_.load(std::memory_order_relaxed);
  if (since == 0) {  // the dip starts: the interval runs from here
    below_since_.compare_exchange_strong(since, now, std::memory_order_relaxed);
    return peak;
  }
  if (now - since < shrink_interval_ || !below_since_.compare_exchange_strong(since, now, std::memory_order_relaxed))
    return peak;
  recent_live_peak_.store(peak - peak / 8, std::memory_order_relaxed);
  // The upstream's high-water mark starts again from what it holds now.
  most_held_.store(held_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  return peak - peak / 8;
}

block_cache::give_outcome block_cache::refuse(std::size_t size_class) noexcept {
  held_.fetch_sub(static_cast<std::int64_t>(size_class_bytes(size_class)), std::memory_order_relaxed);
  return give_outcome::refused;
}

// ---- taking ----------------------------------------------------------------------

cached_block block_cache::take_between(stream_ref stream, stream_entry* entry, std::size_t first,
                                       std::size_t last) noexcept {
  if (entry != nullptr) {
    void* pointer = nullptr;
    std::size_t size_class = first;
    {
      const std::lock_guard lock(entry->mutex);
      for (; size_class <= last && (pointer = entry->unsealed.pop(size_class)) == nullptr; ++size_class) {
      }
      if (pointer != nullptr) {
        account(entry->unflushed, -static_cast<std::int64_t>(size_class_bytes(size_class)));
        ++entry->hits;
      }
    }
    if (pointer != nullptr) {
      stream_entry* expected = entry;
      if (wanting_.load(std::memory_order_relaxed) == entry)
        wanting_.compare_exchange_strong(expected, nullptr, std::memory_order_relaxed);
      return {pointer, size_class};
    }
  }
  for (std::size_t size_class = first; size_class <= last; ++size_class)
    if (void* pointer = take_ready(size_class)) return {pointer, size_class};
  if (sealed_blocks_.load(std::memory_order_relaxed) != 0)
    for (std::size_t size_class = first; size_class <= last; ++size_class)
      if (void* pointer = take_sealed(stream, entry, size_class)) return {pointer, size_class};
  return {nullptr, first};
}

void* block_cache::take(stream_ref stream, std::size_t size_class) noexcept {
  stream_entry* entry = entry_of(stream);
  if (void* pointer = take_between(stream, entry, size_class, size_class).pointer) return pointer;
  if (entry != nullptr && wanting_.load(std::memory_order_relaxed) != entry) {
    unanswered_seals_.store(0, std::memory_order_relaxed);
    wanting_.store(entry, std::memory_order_relaxed);
  }
  return nullptr;
}

void* block_cache::take_ready_from(ready_shard& shard, std::size_t size_class) noexcept {
  if (shard.blocks.load(std::memory_order_relaxed) == 0) return nullptr;
  const std::lock_guard lock(shard.mutex);
  void* pointer = shard.lists.pop(size_class);
  if (pointer != nullptr) {
    account(shard.unflushed, -static_cast<std::int64_t>(size_class_bytes(size_class)));
    ++shard.hits;
  }
  shard.blocks.store(shard.lists.blocks(), std::memory_order_relaxed);
  return pointer;
}

void* block_cache::take_ready(std::size_t size_class) noexcept {
  const std::size_t own = this_thread_shard(ready_shard_count);
  for (std::size_t offset = 0; offset < ready_shard_count; ++offset)
    if (void* pointer = take_ready_from(ready_[(own + offset) % ready_shard_count], size_class)) return pointer;
  return nullptr;
}

void* block_cache::take_sealed(stream_ref stream, stream_entry* entry, std::size_t size_class) noexcept {
  sealed_block block{};
  {
    const std::lock_guard lock(sealed_mutex_);
    std::vector<sealed_block>& list = sealed_[size_class];
    if (list.empty()) return nullptr;
    // The stream's own blocks first (no wait, and no other stream loses its
    // block to it), then those whose event is known to have completed, then
    // the newest.
    auto chosen = std::find_if(list.rbegin(), list.rend(), [&](const sealed_block& each) { return each.origin == entry; });
    if (chosen == list.rend())
      chosen = std::find_if(list.rbegin(), list.rend(), [&](const sealed_block& each) {
        return each.event->completed.load(std::memory_order_relaxed);
      });
    if (chosen == list.rend()) chosen = list.rbegin();
    block = *chosen;
    *chosen = list.back();
    list.pop_back();
    block.origin->sealed.fetch_sub(1, std::memory_order_relaxed);
    sealed_blocks_.fetch_sub(1, std::memory_order_relaxed);
    approximate_bytes_.fetch_sub(static_cast<std::int64_t>(size_class_bytes(size_class)), std::memory_order_relaxed);
  }
  const bool own = block.origin == entry;
  bool ordered = own || block.event->completed.load(std::memory_order_relaxed);
  if (!ordered && ordering_.has_completed(block.event->event)) {
    block.event->completed.store(true, std::memory_order_relaxed);
    ordered = true;
  }
  if (!ordered) ordered = ordering_.make_wait(stream, block.event->event);
  const std::lock_guard lock(sealed_mutex_);
  if (!ordered) {  // CUDA refused the wait: the block stays sealed
    try {
      sealed_[size_class].push_back(block);
      block.origin->sealed.fetch_add(1, std::memory_order_relaxed);
      sealed_blocks_.fetch_add(1, std::memory_order_relaxed);
      approximate_bytes_.fetch_add(static_cast<std::int64_t>(size_class_bytes(size_class)), std::memory_order_relaxed);
      return nullptr;
    } catch (...) {
      // No room to put it back: hand it out after all, waiting on the host.
      if (!ordering_.has_completed(block.event->event)) {
        try {
          ordering_.synchronize_all_devices();
        } catch (...) {
        }
      }
    }
  }
  sealed_hits_.fetch_add(1, std::memory_order_relaxed);
  if (!own) {
    cross_.fetch_add(1, std::memory_order_relaxed);
    if (wanting_.load(std::memory_order_relaxed) == entry) unanswered_seals_.store(0, std::memory_order_relaxed);
  }
  release_reference(block.event);
  if (own && wanting_.load(std::memory_order_relaxed) == entry) {
    stream_entry* expected = entry;
    wanting_.compare_exchange_strong(expected, nullptr, std::memory_order_relaxed);
  }
  return block.pointer;
}

std::atomic<std::uint32_t>& block_cache::recorded_slot(const void* pointer) noexcept {
  // Blocks are 256-byte aligned at least: drop those bits, mix the rest, keep the top 10.
  const auto bits = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(pointer) >> 8) * 0x9e3779b97f4a7c15ull;
  return recorded_filter_[static_cast<std::size_t>(bits >> 54)];
}

void* block_cache::take_larger(stream_ref stream, std::size_t& size_class) noexcept {
  if (keep_nothing_ || held_.load(std::memory_order_relaxed) + static_cast<std::int64_t>(size_class_bytes(size_class)) <=
                           most_held_.load(std::memory_order_relaxed))
    return nullptr;  // the upstream held this much before: a new block takes nothing it had not
  // The block's entry in recorded_classes_ is made first, under a key of this
  // call's own, so that no block leaves the lists unless its class is kept.
  const int placeholder = 0;
  try {
    const std::lock_guard lock(recorded_mutex_);
    recorded_classes_.reserve(recorded_classes_.size() + 1);
    recorded_classes_.emplace(&placeholder, 0);
  } catch (...) {
    return nullptr;
  }
  stream_entry* entry = entry_of(stream);
  const cached_block block = take_between(stream, entry, size_class + 1,
                                          std::min(size_class + size_classes_per_octave, size_class_count - 1));
  {
    const std::lock_guard lock(recorded_mutex_);
    auto node = recorded_classes_.extract(&placeholder);
    if (block.pointer == nullptr) return nullptr;
    node.key() = block.pointer;
    node.mapped() = block.size_class;
    recorded_classes_.insert(std::move(node));  // reserved: no allocation
    recorded_slot(block.pointer).fetch_add(1, std::memory_order_relaxed);  // before the pointer leaves this thread
  }
  size_class = block.size_class;
  stream_entry* expected = entry;  // served after all: take's request for sealed blocks is withdrawn
  if (entry != nullptr && wanting_.load(std::memory_order_relaxed) == entry)
    wanting_.compare_exchange_strong(expected, nullptr, std::memory_order_relaxed);
  return block.pointer;
}

bool block_cache::note_graph_block(void* pointer) noexcept {
  try {
    const std::lock_guard lock(recorded_mutex_);
    recorded_classes_.emplace(pointer, graph_block);
  } catch (...) {
    return false;
  }
  recorded_slot(pointer).fetch_add(1, std::memory_order_relaxed);
  return true;
}

std::size_t block_cache::class_when_freed(void* pointer, std::size_t size_class) noexcept {
  std::atomic<std::uint32_t>& slot = recorded_slot(pointer);
  if (slot.load(std::memory_order_relaxed) == 0) return size_class;
  const std::lock_guard lock(recorded_mutex_);
  const auto found = recorded_classes_.find(pointer);
  if (found == recorded_classes_.end()) return size_class;
  const std::size_t recorded = found->second;
  recorded_classes_.erase(found);
  slot.fetch_sub(1, std::memory_order_relaxed);
  return recorded;
}

void block_cache::note_taken_upstream(std::size_t size_class) noexcept {
  const auto bytes = static_cast<std::int64_t>(size_class_bytes(size_class));
  const std::int64_t held = held_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::int64_t most = most_held_.load(std::memory_order_relaxed);
  while (held > most && !most_held_.compare_exchange_weak(most, held, std::memory_order_relaxed)) {
  }
}

// ---- giving ----------------------------------------------------------------------

block_cache::give_outcome block_cache::give(stream_ref stream, std::size_t size_class, void* pointer) noexcept {
  stream_entry* entry = entry_of(stream);
  if (entry == nullptr) return refuse(size_class);
  std::vector<cached_block> to_seal;
  give_outcome outcome;
  {
    const std::lock_guard lock(entry->mutex);
    outcome = keeps(size_class, entry->unflushed);
    if (outcome == give_outcome::refused) return outcome;
    if (!entry->unsealed.push(size_class, pointer)) return refuse(size_class);
    account(entry->unflushed, static_cast<std::int64_t>(size_class_bytes(size_class)));
    stream_entry* wanting = wanting_.load(std::memory_order_relaxed);
    const bool wanted = wanting != nullptr && wanting != entry;
    if (!stream_share_) note_freeing(*entry);
    // Over the line the trim that follows measures the total with this stream's pending bytes.
    if (outcome == give_outcome::kept_over_live) settle(entry->unflushed, 0);
    const std::size_t held = entry->unsealed.bytes();
    const bool seal = entry->frees < young_stream_frees || wanted || (held > least_share_ && held > share_now());
    // The stream that missed may be gone: unless it takes sealed blocks, its
    // request lapses after a few seals, or every other stream would record an
    // event at every free from then on.
    if (wanted && unanswered_seals_.fetch_add(1, std::memory_order_relaxed) + 1 >= unanswered_seals_limit)
      wanting_.compare_exchange_strong(wanting, nullptr, std::memory_order_relaxed);
    ++entry->frees;
    if (seal) {
      try {
        entry->unsealed.take_all_keeping_room(to_seal);
      } catch (...) {
        to_seal.clear();  // sealing is an optimisation: the blocks stay with their stream
      }
    }
  }
  if (!to_seal.empty()) seal(stream, *entry, to_seal);
  return outcome;
}

block_cache::give_outcome block_cache::give_ready(std::size_t size_class, void* pointer) noexcept {
  ready_shard& own = ready_[this_thread_shard(ready_shard_count)];
  const std::lock_guard lock(own.mutex);
  const give_outcome outcome = keeps(size_class, own.unflushed);
  if (outcome == give_outcome::refused) return outcome;
  if (!own.lists.push(size_class, pointer)) return refuse(size_class);
  account(own.unflushed, static_cast<std::int64_t>(size_class_bytes(size_class)));
  if (outcome == give_outcome::kept_over_live) settle(own.unflushed, 0);  // as in give
  own.blocks.store(own.lists.blocks(), std::memory_order_relaxed);
  return outcome;
}

void block_cache::seal(stream_ref stream, stream_entry& entry, std::vector<cached_block>& blocks) noexcept {
  ordering_event event = ordering_.record(stream);
  sealed_event* sealed = nullptr;
  if (event != nullptr) {
    try {
      sealed = new sealed_event{event, 0};
    } catch (...) {
      ordering_.recycle(event);
    }
  }
  std::size_t moved = 0;
  if (sealed != nullptr) {
    const std::lock_guard lock(sealed_mutex_);
    try {
      for (; moved < blocks.size(); ++moved) {
        const cached_block& block = blocks[moved];
        sealed_[block.size_class].push_back({block.pointer, block.size_class, sealed, &entry});
      }
    } catch (...) {
    }
    sealed->references = moved;
    entry.sealed.fetch_add(moved, std::memory_order_relaxed);
    sealed_blocks_.fetch_add(moved, std::memory_order_relaxed);
    if (moved == 0) {
      ordering_.recycle(event);
      delete sealed;
    }
    seals_.fetch_add(1, std::memory_order_relaxed);
  }
  // The blocks not sealed go back to the stream, into the room it kept for
  // them; the stream's pending count joins the shared total, which trims read
  // and which sealed blocks leave.
  const std::lock_guard lock(entry.mutex);
  for (std::size_t index = 0; index < moved; ++index) entry.unsealed.let_go(blocks[index].size_class);
  static_cast<void>(put_back(entry, std::span(blocks).subspan(moved)));  // their bytes never left the total
  settle(entry.unflushed, 0);
}

void block_cache::release_reference(sealed_event* event) noexcept {
  if (--event->references != 0) return;
  ordering_.recycle(event->event);
  delete event;
}

// ---- giving back upstream -------------------------------------------------------------

block_cache::eviction block_cache::evict_sealed(stream_ref stream, std::size_t bytes,
                                                std::vector<evicted_block>& out) noexcept {
  std::vector<sealed_block> chosen;
  std::size_t moved = 0;
  bool complete = true;
  {
    const std::lock_guard lock(sealed_mutex_);
    try {
      for (std::size_t size_class = size_class_count; size_class-- > 0 && moved < bytes;) {
        std::vector<sealed_block>& list = sealed_[size_class];
        for (std::size_t index = list.size(); index-- > 0 && moved < bytes;) {
          chosen.push_back(list[index]);  // first: a block leaves its list only once it is chosen
          list[index].origin->sealed.fetch_sub(1, std::memory_order_relaxed);
          list[index] = list.back();
          list.pop_back();
          moved += size_class_bytes(size_class);
        }
      }
    } catch (...) {  // no memory for the choice: the rest stay sealed
      complete = false;
    }
    if (!has_room(out, chosen.size())) {
      // They stay sealed: their lists just gave up the room they need.
      for (const sealed_block& block : chosen) {
        sealed_[block.size_class].push_back(block);
        block.origin->sealed.fetch_add(1, std::memory_order_relaxed);
      }
      return {0, false};
    }
    sealed_blocks_.fetch_sub(chosen.size(), std::memory_order_relaxed);
    approximate_bytes_.fetch_sub(static_cast<std::int64_t>(moved), std::memory_order_relaxed);
  }
  // Freed on `stream` once it waits for each event not known to have completed;
  // blocks it sealed itself need no wait: its own order puts this free after the seal.
  const stream_entry* own = chosen.empty() ? nullptr : entry_of(stream);
  sealed_event* waited = nullptr;
  for (const sealed_block& block : chosen) {
    if (block.origin != own && block.event != waited && !block.event->completed.load(std::memory_order_relaxed)) {
      if (!ordering_.make_wait(stream, block.event->event)) {
        try {
          ordering_.synchronize_all_devices();
        } catch (...) {
        }
      }
      waited = block.event;
    }
    out.push_back({block.pointer, block.size_class, stream});
  }
  const std::lock_guard lock(sealed_mutex_);
  for (const sealed_block& block : chosen) release_reference(block.event);
  return {moved, complete};
}


std::int64_t block_cache::allowed_cached(std::int64_t live, std::int64_t peak, std::int64_t budget) const noexcept {
  // Over an upstream that merges what it gets back, a block handed back is
  // not lost to other sizes: what is live now is the measure, not the peak.
  if (per_live_) {
    // In double first: the product of a huge factor would not fit the cast.
    const double allowed = std::min(static_cast<double>(live) * *per_live_, static_cast<double>(budget));
    return std::min(std::max(static_cast<std::int64_t>(allowed), floor_bytes_), budget);
  }
  // An eighth over the peak: a random mix's classes drift, and a cache held
  // to the peak trims blocks that the next rise misses (a 100,000-step mix of
  // 256 B..4 MiB missed 58 times at the peak, 23 times an eighth over it).
  return std::min(std::max({live, peak + peak / 8, floor_bytes_}), budget);
}

std::size_t block_cache::excess(std::size_t incoming) const noexcept {
  const std::int64_t cached = std::max<std::int64_t>(0, approximate_bytes_.load(std::memory_order_relaxed));
  const std::int64_t live = std::max<std::int64_t>(0, held_.load(std::memory_order_relaxed) - cached);
  const std::int64_t peak = std::max<std::int64_t>(0, recent_live_peak_.load(std::memory_order_relaxed));
  const auto coming = static_cast<std::int64_t>(incoming);
  const std::int64_t allowed =
      allowed_cached(live + coming, peak, std::max<std::int64_t>(0, static_cast<std::int64_t>(max_bytes_) - coming));
  return cached > allowed ? static_cast<std::size_t>(cached - allowed) : 0;
}

void block_cache::make_room(stream_ref stream, std::size_t size_class, std::vector<evicted_block>& out) noexcept {
  // The total counts the caller's own pending bytes before it is measured.
  if (stream_entry* entry = entry_of(stream)) {
    const std::lock_guard lock(entry->mutex);
    settle(entry->unflushed, 0);
  }
  if (const std::size_t over = excess(size_class_bytes(size_class)); over != 0) evict(stream, over, out);
}

void block_cache::trim_to_live(stream_ref stream, std::vector<evicted_block>& out) noexcept {
  // The free that asks for it added its own pending bytes to the total (give, give_ready).
  // A little below the line, so that frees at the line do not trim each time.
  if (const std::size_t over = excess(0); over != 0) evict(stream, over + static_cast<std::size_t>(floor_bytes_) / 8, out);
}

void block_cache::evict(stream_ref stream, std::size_t bytes, std::vector<evicted_block>& out) noexcept {
  std::size_t over = bytes;
  const std::size_t first = out.size();
  const auto from_lists = [&](free_lists& lists, std::int64_t& unflushed) noexcept {
    const std::size_t moved = lists.drain_bytes_into(out, over, stream);
    settle(unflushed, -static_cast<std::int64_t>(moved));
    over -= std::min(over, moved);
  };
  // Blocks no queued work touches first, then sealed ones (after `stream`
  // waits for their events), then the stream's own.
  for (std::size_t index = 0; index < ready_shard_count && over != 0; ++index) {
    ready_shard& shard = ready_[index];
    if (shard.blocks.load(std::memory_order_relaxed) == 0) continue;
    const std::lock_guard lock(shard.mutex);
    from_lists(shard.lists, shard.unflushed);
    shard.blocks.store(shard.lists.blocks(), std::memory_order_relaxed);
  }
  if (over != 0 && sealed_blocks_.load(std::memory_order_relaxed) != 0)
    over -= std::min(over, evict_sealed(stream, over, out).bytes);
  if (over != 0) {
    if (stream_entry* entry = entry_of(stream)) {
      const std::lock_guard lock(entry->mutex);
      from_lists(entry->unsealed, entry->unflushed);
    }
  }
  note_returned(out, first);
}

void block_cache::note_returned(const std::vector<evicted_block>& out, std::size_t first) noexcept {
  std::int64_t bytes = 0;
  for (std::size_t index = first; index < out.size(); ++index)
    bytes += static_cast<std::int64_t>(size_class_bytes(out[index].size_class));
  held_.fetch_sub(bytes, std::memory_order_relaxed);
}

bool block_cache::evict_unsealed(stream_entry& entry, stream_ref stream, std::vector<evicted_block>& out) noexcept {
  const std::lock_guard lock(entry.mutex);
  return evict_all_of(entry.unsealed, entry.unflushed, stream, out);
}

bool block_cache::evict_all_of(free_lists& lists, std::int64_t& unflushed, stream_ref stream,
                               std::vector<evicted_block>& out) noexcept {
  const std::size_t bytes = lists.bytes();
  const std::size_t moved = lists.drain_bytes_into(out, bytes, stream);
  settle(unflushed, -static_cast<std::int64_t>(moved));
  return moved == bytes;
}

void block_cache::evict_own(stream_ref stream, std::vector<evicted_block>& out) noexcept {
  stream_entry* entry = entry_of(stream);
  if (entry == nullptr) return;
  const std::size_t first = out.size();
  evict_unsealed(*entry, stream, out);
  if (out.size() != first) note_returned(out, first);
  // Blocks the stream sealed itself: its own order puts a free on it after the seal, with no wait.
  const std::size_t sealed_now = entry->sealed.load(std::memory_order_relaxed);
  if (sealed_now == 0) return;
  if (!has_room(out, sealed_now)) return;  // outside the shared lock; they stay sealed
  const std::lock_guard lock(sealed_mutex_);
  // Sealed since: what does not fit stays for a later hand-back.
  const std::size_t own = std::min(entry->sealed.load(std::memory_order_relaxed), out.capacity() - out.size());
  const std::size_t sealed_first = out.size();
  std::size_t moved = 0;
  for (std::size_t size_class = 0; size_class < size_class_count && out.size() - sealed_first < own; ++size_class) {
    std::vector<sealed_block>& list = sealed_[size_class];
    for (std::size_t index = list.size(); index-- > 0 && out.size() - sealed_first < own;) {
      if (list[index].origin != entry) continue;
      out.push_back({list[index].pointer, size_class, stream});
      release_reference(list[index].event);
      list[index] = list.back();
      list.pop_back();
      moved += size_class_bytes(size_class);
    }
  }
  const std::size_t taken = out.size() - sealed_first;
  entry->sealed.fetch_sub(taken, std::memory_order_relaxed);
  sealed_blocks_.fetch_sub(taken, std::memory_order_relaxed);
  approximate_bytes_.fetch_sub(static_cast<std::int64_t>(moved), std::memory_order_relaxed);
  if (taken != 0) note_returned(out, sealed_first);
}

bool block_cache::evict_all_ordered(stream_ref stream, std::vector<evicted_block>& out) noexcept {
  const std::size_t first = out.size();
  bool complete = true;
  if (stream_entry* entry = entry_of(stream)) complete = evict_unsealed(*entry, stream, out);
  for (ready_shard& shard : ready_) {
    const std::lock_guard lock(shard.mutex);
    complete = evict_all_of(shard.lists, shard.unflushed, stream, out) && complete;
    shard.blocks.store(shard.lists.blocks(), std::memory_order_relaxed);
  }
  complete = evict_sealed(stream, std::numeric_limits<std::size_t>::max(), out).complete && complete;
  note_returned(out, first);
  return complete;
}

bool block_cache::drain(stream_ref stream, std::vector<evicted_block>& out) {
  // The blocks are taken before the wait, so the wait covers every one of
  // them: a block another thread frees meanwhile stays for a later drain.
  struct taken_from {
    stream_entry* entry;
    std::vector<cached_block> blocks;
  };
  std::vector<taken_from> taken;
  bool others_hold_blocks = false;
  const stream_key draining = key_of(stream, ordering_);
  // Not known to be idle (a failed wait, no memory for the list): the blocks go back to their streams.
  const auto give_all_back = [&]() noexcept {
    for (const taken_from& each : taken) {
      const std::lock_guard lock(each.entry->mutex);
      settle(each.entry->unflushed, put_back(*each.entry, each.blocks));
    }
  };
  try {
    for (entry_shard& shard : entries_) {
      const std::lock_guard lock(shard.mutex);
      for (const auto& entry : shard.entries) {
        const std::lock_guard entry_lock(entry->mutex);
        if (entry->unsealed.blocks() == 0) continue;
        taken.push_back({entry.get(), {}});
        const std::size_t bytes = entry->unsealed.bytes();
        entry->unsealed.take_all_keeping_room(taken.back().blocks);
        settle(entry->unflushed, -static_cast<std::int64_t>(bytes));
        others_hold_blocks = others_hold_blocks || entry->key != draining;
      }
    }
    std::size_t count = 0;
    for (const taken_from& each : taken) count += each.blocks.size();
    out.reserve(out.size() + count);  // room first: every block taken reaches `out`
    // Blocks freed on other streams, which may be gone: wait for everything, once.
    if (others_hold_blocks) ordering_.synchronize_all_devices();
  } catch (...) {
    give_all_back();
    throw;
  }
  const std::size_t first = out.size();
  for (const taken_from& each : taken) {
    const std::lock_guard lock(each.entry->mutex);
    for (const cached_block& block : each.blocks) {
      each.entry->unsealed.let_go(block.size_class);
      out.push_back({block.pointer, block.size_class, stream});
    }
  }
  note_returned(out, first);
  return evict_all_ordered(stream, out);
}

std::int64_t block_cache::put_back(stream_entry& entry, std::span<const cached_block> blocks) noexcept {
  std::int64_t bytes = 0;
  for (const cached_block& block : blocks) {
    entry.unsealed.put_back(block.size_class, block.pointer);
    bytes += static_cast<std::int64_t>(size_class_bytes(block.size_class));
  }
  return bytes;
}

// ---- what it holds ---------------------------------------------------------------

template <typename ShardVisitor, typename EntryVisitor>
void block_cache::visit_locked(ShardVisitor&& visit_shard, EntryVisitor&& visit_entry) const {
  for (const ready_shard& shard : ready_) {
    const std::lock_guard lock(shard.mutex);
    visit_shard(shard);
  }
  for (const entry_shard& shard : entries_) {
    const std::lock_guard lock(shard.mutex);
    for (const auto& entry : shard.entries) {
      const std::lock_guard entry_lock(entry->mutex);
      visit_entry(*entry);
    }
  }
}

std::size_t block_cache::bytes() const {
  std::size_t total = 0;
  visit_locked([&](const ready_shard& shard) { total += shard.lists.bytes(); },
               [&](const stream_entry& entry) { total += entry.unsealed.bytes(); });
  const std::lock_guard lock(sealed_mutex_);
  for (std::size_t size_class = 0; size_class < size_class_count; ++size_class)
    total += sealed_[size_class].size() * size_class_bytes(size_class);
  return total;
}

std::size_t block_cache::blocks() const {
  std::size_t total = sealed_blocks_.load(std::memory_order_relaxed);
  visit_locked([&](const ready_shard& shard) { total += shard.lists.blocks(); },
               [&](const stream_entry& entry) { total += entry.unsealed.blocks(); });
  return total;
}

std::uint64_t block_cache::hits() const {
  std::uint64_t total = sealed_hits_.load(std::memory_order_relaxed);
  visit_locked([&](const ready_shard& shard) { total += shard.hits; },
               [&](const stream_entry& entry) { total += entry.hits; });
  return total;
}

std::size_t block_cache::streams() const {
  std::size_t total = 0;
  for (const entry_shard& shard : entries_) {
    const std::lock_guard lock(shard.mutex);
    total += shard.entries.size();
  }
  return total;
}

std::vector<std::pair<cudaStream_t, std::size_t>> block_cache::bytes_by_stream() const {
  std::vector<std::pair<cudaStream_t, std::size_t>> result;
  std::size_t ready_bytes = 0;
  for (const ready_shard& shard : ready_) {
    const std::lock_guard lock(shard.mutex);
    ready_bytes += shard.lists.bytes();
  }
  if (ready_bytes != 0) result.emplace_back(nullptr, ready_bytes);
  std::vector<std::pair<const stream_entry*, std::size_t>> sealed_by_origin;
  {
    const std::lock_guard lock(sealed_mutex_);
    for (std::size_t size_class = 0; size_class < size_class_count; ++size_class)
      for (const sealed_block& block : sealed_[size_class]) {
        auto found = std::find_if(sealed_by_origin.begin(), sealed_by_origin.end(),
                                  [&](const auto& each) { return each.first == block.origin; });
        if (found == sealed_by_origin.end()) found = sealed_by_origin.insert(found, {block.origin, 0});
        found->second += size_class_bytes(size_class);
      }
  }
  for (const entry_shard& shard : entries_) {
    const std::lock_guard lock(shard.mutex);
    for (const auto& entry : shard.entries) {
      std::size_t bytes = 0;
      {
        const std::lock_guard entry_lock(entry->mutex);
        bytes = entry->unsealed.bytes();
      }
      for (const auto& [origin, sealed_bytes] : sealed_by_origin)
        if (origin == entry.get()) bytes += sealed_bytes;
      if (bytes != 0) result.emplace_back(entry->key.stream, bytes);
    }
  }
  return result;
}

}  // namespace cudapmr::detail
