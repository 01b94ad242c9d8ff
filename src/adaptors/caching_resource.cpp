#include "cudapmr/adaptors/caching_resource.hpp"

#include "cudapmr/detail/synchronize.hpp"
#include "cudapmr/error.hpp"

#include <vector>

namespace cudapmr {
namespace {

/// Alignment of every block the cache asks for; what pools guarantee.
constexpr std::size_t block_alignment = 256;

}  // namespace

caching_resource::~caching_resource() {
  try {
    release();
  } catch (...) {  // a destructor never throws; at worst the blocks stay with the pool
  }
}

bool caching_resource::is_cacheable(std::size_t bytes, std::size_t alignment) const noexcept {
  return bytes != 0 && alignment <= block_alignment && bytes <= options_.max_cached_block;
}

template <class Allocate>
void* caching_resource::allocate_upstream(Allocate&& allocate) {
  counters_.miss();
  try {
    return allocate();
  } catch (const out_of_memory&) {
    release();
    return allocate();
  }
}

void* caching_resource::do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) {
  if (!is_cacheable(bytes, alignment)) return upstream_resource().allocate_async(bytes, alignment, stream);
  const std::size_t size_class = detail::size_class_of(bytes);
  void* p = by_stream_.take(stream, size_class);
  if (p == nullptr) p = ready_.take(size_class);
  if (p != nullptr) {
    counters_.hit();
    return p;
  }
  return allocate_upstream([&] {
    return upstream_resource().allocate_async(detail::size_class_bytes(size_class), block_alignment, stream);
  });
}

void caching_resource::do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment,
                                           stream_ref stream) noexcept {
  if (!is_cacheable(bytes, alignment)) return upstream_resource().deallocate_async(p, bytes, alignment, stream);
  const std::size_t size_class = detail::size_class_of(bytes);
  if (!by_stream_.give(stream, size_class, p))
    upstream_resource().deallocate_async(p, detail::size_class_bytes(size_class), block_alignment, stream);
}

void* caching_resource::do_allocate(std::size_t bytes, std::size_t alignment) {
  detail::validate_alignment(alignment, bytes);
  if (!is_cacheable(bytes, alignment)) return upstream_resource().allocate(bytes, alignment);
  const std::size_t size_class = detail::size_class_of(bytes);
  if (void* p = ready_.take(size_class)) {
    counters_.hit();
    return p;
  }
  return allocate_upstream(
      [&] { return upstream_resource().allocate(detail::size_class_bytes(size_class), block_alignment); });
}

void caching_resource::do_deallocate(void* p, std::size_t bytes, std::size_t alignment) {
  if (p == nullptr) return;
  if (!is_cacheable(bytes, alignment)) return upstream_resource().deallocate(p, bytes, alignment);
  const std::size_t size_class = detail::size_class_of(bytes);
  if (!ready_.give(size_class, p))
    upstream_resource().deallocate(p, detail::size_class_bytes(size_class), block_alignment);
}

void caching_resource::release() {
  // Take the blocks first, then wait: blocks freed after the wait began are
  // not in this batch, so no block is handed back while work may still use it.
  std::vector<detail::cached_block> blocks;
  by_stream_.drain_into(blocks);
  ready_.drain_into(blocks);
  if (blocks.empty()) return;
  detail::synchronize_devices(kind(), device_id());
  const stream_ref stream = upstream_resource().bound_stream();
  for (const detail::cached_block& block : blocks)
    upstream_resource().deallocate_async(block.pointer, detail::size_class_bytes(block.size_class), block_alignment,
                                         stream);
}

cache_statistics caching_resource::statistics() const {
  return {counters_.hits(), counters_.misses(), by_stream_.bytes() + ready_.bytes(),
          by_stream_.blocks() + ready_.blocks()};
}

}  // namespace cudapmr
