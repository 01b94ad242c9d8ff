// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/adaptors/caching_resource.hpp"
#include "cudapmr/detail/call_stack.hpp"
#include "cudapmr/detail/reclaiming_allocation.hpp"

#include "cudapmr/device.hpp"
#include "cudapmr/error.hpp"
#include "cudapmr/managed_memory_resource.hpp"
#include "cudapmr/pinned_memory_resource.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <optional>
#include <stdexcept>

namespace cudapmr {
namespace {

/// The memory of the device the upstream's memory lives on (device or
/// managed memory of one device); none for memory of no one device, or where CUDA cannot say.
std::optional<std::size_t> device_memory_of(const stream_ordered_resource& upstream) noexcept {
  if (upstream.device_id() < 0 || upstream.kind() == memory_kind::pinned || upstream.kind() == memory_kind::pageable)
    return std::nullopt;
  try {
    return device(upstream.device_id()).total_memory();
  } catch (...) {
    return std::nullopt;
  }
}

/// The default budget: an eighth of the upstream device's memory, at least
/// 1 GiB; 1 GiB for memory of no one device, or where CUDA cannot say.
std::size_t default_budget(const stream_ordered_resource& upstream) noexcept {
  constexpr std::size_t fallback = std::size_t{1} << 30;
  const std::optional<std::size_t> memory = device_memory_of(upstream);
  return memory ? std::max(*memory / 8, fallback) : fallback;
}

/// Past this, no trim can make room for a request: the device's memory (managed memory may oversubscribe it).
std::size_t trim_bound(const stream_ordered_resource& upstream) noexcept {
  if (upstream.kind() != memory_kind::device) return std::numeric_limits<std::size_t>::max();
  return device_memory_of(upstream).value_or(std::numeric_limits<std::size_t>::max());
}

caching_options validated(caching_options options, const stream_ordered_resource& upstream) {
  if (options.shrink_interval.count() < 0)
    throw std::invalid_argument(fmt::format("caching_options::shrink_interval of {} ms is negative",
                                            options.shrink_interval.count()));
  if (options.max_cached_per_live && !(*options.max_cached_per_live > 0 && std::isfinite(*options.max_cached_per_live)))
    throw std::invalid_argument(fmt::format("caching_options::max_cached_per_live of {} is not a finite positive number",
                                            *options.max_cached_per_live));
  options.max_cached_block = std::min(options.max_cached_block, largest_cached_block);
  options.shrink_interval = std::min<std::chrono::milliseconds>(options.shrink_interval, std::chrono::hours(24 * 365));
  if (!options.max_cached_bytes) options.max_cached_bytes = default_budget(upstream);
  return options;
}

/// A kind's default pool with a cache over it.
template <class Kind>
struct cached_default_pool {
  Kind pool;
  caching_resource cache{pool, caching_options{.max_cached_block = std::size_t{256} << 20}};
};

/// Never destroyed, like `default_device_resource`'s pools, so that a free
/// during exit still finds it; what it caches goes back to the pool at exit,
/// before CUDA's teardown (CUDA was initialized before `release` was made),
/// where leak checkers see it freed.
template <class Kind>
caching_resource& cached_default() {
  static auto* const stack = new cached_default_pool<Kind>();
  static const struct release_at_exit {
    ~release_at_exit() {
      try {
        stack->cache.release();
      } catch (...) {  // CUDA already shutting down: the driver takes it back
      }
    }
  } release;
  return stack->cache;
}

}  // namespace

caching_resource& default_pinned_resource() { return cached_default<pinned_memory_resource>(); }

caching_resource& default_managed_resource() { return cached_default<managed_memory_resource>(); }

caching_resource::caching_resource(stream_ordered_resource& upstream, caching_options options)
    : caching_resource(upstream, options, detail::stream_ordering_for(upstream.kind())) {}

caching_resource::caching_resource(stream_ordered_resource& upstream, caching_options options,
                                   detail::stream_ordering& ordering)
    : resource_adaptor(upstream),
      options_(validated(options, upstream)),
      ordering_(ordering),
      cache_(ordering, *options_.max_cached_bytes, options_.shrink_interval, options_.max_cached_per_live,
             options_.stream_share),
      device_memory_bytes_(trim_bound(upstream)) {}

caching_resource::~caching_resource() {
  try {
    release();
  } catch (...) {  // a destructor never throws; at worst the blocks stay with the pool
  }
}

void caching_resource::free_upstream(const std::vector<detail::evicted_block>& blocks) noexcept {
  for (const detail::evicted_block& block : blocks)
    upstream_resource().deallocate_async(block.pointer, detail::size_class_bytes(block.size_class), block_alignment,
                                         block.stream);
}

void* caching_resource::allocate_block(std::size_t requested, std::size_t alignment, std::size_t size_class,
                                       stream_ref stream) {
  try {
    return allocate_class(size_class, stream);
  } catch (const out_of_memory& error) {
    // The upstream was asked for a whole size class; the caller asked for less.
    throw out_of_memory(requested, alignment, description(),
                        fmt::format("the upstream refused the {} bytes of its size class",
                                    detail::size_class_bytes(size_class)),
                        error);
  }
}

void* caching_resource::allocate_class(std::size_t size_class, stream_ref stream) {
  std::size_t larger_class = size_class;
  if (void* p = cache_.take_larger(stream, larger_class)) return p;
  cache_.note_miss();
  std::vector<detail::evicted_block> evicted;
  cache_.make_room(stream, size_class, evicted);
  free_upstream(evicted);
  void* p = allocate_upstream(detail::size_class_bytes(size_class), block_alignment, stream);
  cache_.note_taken_upstream(size_class);
  return p;
}

void* caching_resource::allocate_upstream(std::size_t bytes, std::size_t alignment, stream_ref stream) {
  // More than the device has: no trim could make room, and none is worth a wait for every device.
  if (bytes > device_memory_bytes_) return upstream_resource().allocate_async(bytes, alignment, stream);
  std::vector<detail::evicted_block> evicted;
  return detail::allocate_reclaiming(
      upstream_resource(), bytes, alignment, stream,
      [&] {
        static_cast<void>(cache_.evict_all_ordered(stream, evicted));  // what could be listed: the retry tells
        free_upstream(evicted);
      },
      [&]() -> void* {
        evicted.clear();
        static_cast<void>(cache_.drain(stream, evicted));
        free_upstream(evicted);
        return nullptr;  // whole blocks of other sizes cannot serve the request: the upstream must
      });
}

void* caching_resource::do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) {
  if (!is_cacheable(bytes, alignment)) {
    void* p = nullptr;
    // Zero bytes own nothing and a captured stream's allocation is a graph node: neither is worth a trim.
    if (bytes == 0 || is_captured(stream)) {
      p = upstream_resource().allocate_async(bytes, alignment, stream);
    } else {
      if (options_.hand_back_before_large && bytes > options_.max_cached_block) hand_back_own(stream);
      p = allocate_upstream(bytes, alignment, stream);
    }
    note_passed(bytes);
    return p;
  }
  const std::size_t size_class = detail::size_class_of(bytes);
  if (is_captured(stream)) {
    // The upstream's allocation becomes a graph node, whose address is the
    // graph's at every launch: the block goes back upstream at its free. No
    // eviction here either: its frees would become nodes of the graph.
    void* p = nullptr;
    try {
      p = upstream_resource().allocate_async(detail::size_class_bytes(size_class), block_alignment, stream);
    } catch (const out_of_memory& error) {
      throw out_of_memory(bytes, alignment, description(),
                          fmt::format("during stream capture, the upstream refused the {} bytes of its size class",
                                      detail::size_class_bytes(size_class)),
                          error);
    }
    if (!cache_.note_graph_block(p)) {
      upstream_resource().deallocate_async(p, detail::size_class_bytes(size_class), block_alignment, stream);
      throw std::bad_alloc();
    }
    note_passed(detail::size_class_bytes(size_class));
    return p;
  }
  if (void* p = cache_.take(stream, size_class)) return p;
  return allocate_block(bytes, alignment, size_class, stream);
}

void caching_resource::do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment,
                                           stream_ref stream) noexcept {
  if (!is_cacheable(bytes, alignment)) {
    note_passed_back(bytes);
    return upstream_resource().deallocate_async(p, bytes, alignment, stream);
  }
  const std::size_t requested_class = detail::size_class_of(bytes);
  const std::size_t size_class = cache_.class_when_freed(p, requested_class);
  if (size_class == detail::block_cache::graph_block) {
    note_passed_back(detail::size_class_bytes(requested_class));
    return upstream_resource().deallocate_async(p, detail::size_class_bytes(requested_class), block_alignment, stream);
  }
  // Freed during capture: the graph may use the block whenever it replays, so
  // it goes upstream as a graph node instead of into the cache.
  if (is_captured(stream)) {
    cache_.note_returned_upstream(size_class);
    return upstream_resource().deallocate_async(p, detail::size_class_bytes(size_class), block_alignment, stream);
  }
  const auto outcome = cache_.give(stream, size_class, p);
  if (outcome == detail::block_cache::give_outcome::refused)
    return upstream_resource().deallocate_async(p, detail::size_class_bytes(size_class), block_alignment, stream);
  if (outcome == detail::block_cache::give_outcome::kept_over_live) trim_to_live(stream);
}

void caching_resource::evict_and_free(
    void (detail::block_cache::*evict)(stream_ref, std::vector<detail::evicted_block>&) noexcept,
    stream_ref stream) noexcept {
  std::vector<detail::evicted_block> evicted;
  (cache_.*evict)(stream, evicted);  // without memory for the list, the blocks stay cached
  free_upstream(evicted);
}

void caching_resource::hand_back_own(stream_ref stream) noexcept {
  evict_and_free(&detail::block_cache::evict_own, stream);
}

void caching_resource::trim_to_live(stream_ref stream) noexcept {
  evict_and_free(&detail::block_cache::trim_to_live, stream);
}

void* caching_resource::do_allocate(std::size_t bytes, std::size_t alignment) {
  detail::validate_alignment(alignment, bytes);
  const detail::call_site_scope call_site(__builtin_return_address(0));  // std::pmr's caller, for an adaptor below
  // Too large to cache: in order on the bound stream as any pmr allocation, so that exhaustion trims the cache first.
  if (!is_cacheable(bytes, alignment)) return stream_ordered_resource::do_allocate(bytes, alignment);
  if (void* p = cache_.take_ready(detail::size_class_of(bytes))) return p;
  // In stream order on the bound stream, then synchronized: blocks freed there are fine.
  return stream_ordered_resource::do_allocate(bytes, alignment);
}

void caching_resource::do_deallocate(void* p, std::size_t bytes, std::size_t alignment) {
  if (p == nullptr) return;
  // Handed out, the bound stream may have work queued or be captured: the free
  // is one on that stream, as any resource's pmr free is.
  if (bound_stream_shared() || !is_cacheable(bytes, alignment))
    return stream_ordered_resource::do_deallocate(p, bytes, alignment);
  const std::size_t requested_class = detail::size_class_of(bytes);
  const std::size_t size_class = cache_.class_when_freed(p, requested_class);
  if (size_class == detail::block_cache::graph_block) {
    note_passed_back(detail::size_class_bytes(requested_class));
    return upstream_resource().deallocate(p, detail::size_class_bytes(requested_class), block_alignment);
  }
  // With the bound stream never handed out, nothing queued can touch the block.
  const auto outcome = cache_.give_ready(size_class, p);
  if (outcome == detail::block_cache::give_outcome::refused)
    return upstream_resource().deallocate(p, detail::size_class_bytes(size_class), block_alignment);
  if (outcome == detail::block_cache::give_outcome::kept_over_live) trim_to_live(own_bound_stream());
}

void caching_resource::release() {
  if (cache_.blocks() == 0) return;  // nothing to hand back: the upstream is not even asked its stream
  std::vector<detail::evicted_block> blocks;
  const bool whole = cache_.drain(own_bound_stream(), blocks);
  free_upstream(blocks);
  if (!whole) throw std::bad_alloc();  // no memory to list every block: the rest stay cached
}

void caching_resource::release_without_waiting() {
  if (cache_.blocks() == 0) return;
  std::vector<detail::evicted_block> blocks;
  const bool whole = cache_.evict_all_ordered(own_bound_stream(), blocks);
  free_upstream(blocks);
  if (!whole) throw std::bad_alloc();  // as release
}

void caching_resource::do_trim(stream_ref stream) {
  std::vector<detail::evicted_block> blocks;
  const bool whole = cache_.drain(stream, blocks);
  free_upstream(blocks);
  upstream_resource().trim(stream);
  if (!whole) throw std::bad_alloc();  // as release
}

cache_statistics caching_resource::statistics() const {
  return {cache_.hits(),   cache_.misses(),    cache_.bytes(),
          cache_.blocks(), cache_.max_bytes(), cache_.seals(),
          cache_.cross_stream_reuses(), upstream_resource().state().reserved_bytes, cache_.streams()};
}

void caching_resource::do_report(resource_state& state) const {
  state.cached_bytes = cache_.bytes();
  // Live: the cached blocks' bytes handed out (whole size classes) and what went upstream uncached.
  const std::size_t held = cache_.held_bytes();
  const std::int64_t passed = std::max<std::int64_t>(0, passed_live_.load(std::memory_order_relaxed));
  state.used_bytes = held - std::min(held, *state.cached_bytes) + static_cast<std::size_t>(passed);
  state.releasable_bytes = state.cached_bytes;
  for (const auto& [stream, bytes] : cache_.bytes_by_stream())
    state.cached_bytes_by_stream.push_back({stream_ref(stream), bytes});
}

}  // namespace cudapmr
