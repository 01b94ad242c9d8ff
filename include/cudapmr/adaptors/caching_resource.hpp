#pragma once
/// \file caching_resource.hpp
/// A fast front end for small stream-ordered allocations: a cache of freed
/// blocks by size class over any stream_ordered_resource.

#include "cudapmr/adaptors/resource_adaptor.hpp"
#include "cudapmr/detail/block_cache.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

namespace cudapmr {

/// Options of a caching_resource.
struct caching_options {
  /// Requests larger than this, or aligned past 256 bytes, go straight upstream.
  std::size_t max_cached_block = std::size_t{1} << 30;
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
};

/// Caches freed blocks by size class (four per power of two) so that a free
/// followed by an allocation reuses memory with no CUDA call.
///
/// - A block freed with `deallocate_async` on stream S is reused only by later
///   allocations on S, which the stream orders after every earlier use.
/// - A block freed with pmr `deallocate` is, as the pmr contract has it, no
///   longer in use: it is reused at once, by the pmr path (no synchronize) and
///   by stream-ordered allocations on any stream.
/// - Memory reaches another stream only after `release()`, which synchronizes
///   the device before handing the cache back upstream; an upstream
///   exhaustion releases the cache and retries once.
///
/// Thread-safe; caches are sharded by stream and by thread, with no global
/// lock. `cudaStreamPerThread` is cached per thread. Blocks are kept by
/// stream handle, and CUDA may hand a destroyed stream's handle to a new
/// stream: synchronize a stream before destroying it if queued work may still
/// use memory freed on it (or call `release()`). Blocks of destroyed streams
/// are freed on the upstream's bound stream at release.
class caching_resource final : public resource_adaptor {
 public:
  explicit caching_resource(stream_ordered_resource& upstream, caching_options options = {}) noexcept
      : resource_adaptor(upstream), options_(options) {}
  /// Releases the cache. Never throws.
  ~caching_resource() override;

  /// Synchronizes the upstream's device(s), then hands every cached block
  /// back upstream. \throws cuda_error if the synchronize fails.
  void release();
  [[nodiscard]] cache_statistics statistics() const;
  [[nodiscard]] std::string description() const override { return describe_as("caching_resource"); }

 private:
  void* do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) override;
  void do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept override;
  void* do_allocate(std::size_t bytes, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override;

  [[nodiscard]] bool is_cacheable(std::size_t bytes, std::size_t alignment) const noexcept;
  /// Calls `allocate` upstream; on exhaustion releases the cache and retries once.
  template <class Allocate>
  void* allocate_upstream(Allocate&& allocate);

  caching_options options_;
  detail::ready_block_cache ready_;
  detail::stream_block_cache by_stream_;
  detail::cache_counters counters_;
};

}  // namespace cudapmr
