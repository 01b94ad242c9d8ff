// caching_resource: reuse on one stream, no early reuse across streams,
// release, exhaustion, threads. Host tests use the host resource with
// made-up stream handles (it ignores streams; the cache keys on them).
#include "support/resource_cases.hpp"

#include <cudapmr/adaptors/caching_resource.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace cudapmr::test {
namespace {

cudaStream_t fake_stream(std::uintptr_t id) { return reinterpret_cast<cudaStream_t>(id * 0x1000); }

TEST(CachingResource, ReusesAFreedBlockOnTheSameStreamWithoutGoingUpstream) {
  host_memory_resource upstream;
  caching_resource cache(upstream);
  void* first = cache.allocate_async(1000, fake_stream(1));
  cache.deallocate_async(first, 1000, fake_stream(1));
  const std::size_t upstream_bytes = upstream.used_bytes();
  void* second = cache.allocate_async(900, fake_stream(1));  // same size class
  EXPECT_EQ(second, first);
  EXPECT_EQ(upstream.used_bytes(), upstream_bytes);
  const cache_statistics statistics = cache.statistics();
  EXPECT_EQ(statistics.hits, 1u);
  EXPECT_EQ(statistics.misses, 1u);
  cache.deallocate_async(second, 900, fake_stream(1));
}

TEST(CachingResource, NeverHandsAStreamOrderedFreeToAnotherStream) {
  host_memory_resource upstream;
  caching_resource cache(upstream);
  void* on_first = cache.allocate_async(4096, fake_stream(1));
  cache.deallocate_async(on_first, 4096, fake_stream(1));
  void* on_second = cache.allocate_async(4096, fake_stream(2));
  EXPECT_NE(on_second, on_first) << "the free on stream 1 may not have completed";
  cache.deallocate_async(on_second, 4096, fake_stream(2));
}

TEST(CachingResource, PmrFreedBlocksAreReadyForEveryPath) {
  host_memory_resource upstream;
  caching_resource cache(upstream);
  void* p = cache.allocate(5000);
  cache.deallocate(p, 5000);
  EXPECT_EQ(cache.allocate(5000), p);  // the pmr path reuses it with no synchronize
  cache.deallocate(p, 5000);
  EXPECT_EQ(cache.allocate_async(5000, fake_stream(7)), p);  // so does any stream
  cache.deallocate_async(p, 5000, fake_stream(7));
}

TEST(CachingResource, BlocksAreWholeSizeClassesAlignedTo256) {
  host_memory_resource upstream;
  caching_resource cache(upstream);
  void* p = cache.allocate_async(1000, fake_stream(1));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 256, 0u);
  EXPECT_EQ(upstream.used_bytes(), detail::size_class_bytes(detail::size_class_of(1000)));
  cache.deallocate_async(p, 1000, fake_stream(1));
}

TEST(CachingResource, ReleaseHandsEverythingBackUpstream) {
  host_memory_resource upstream;
  caching_resource cache(upstream);
  std::vector<void*> blocks;
  for (std::size_t bytes = 256; bytes <= mebibyte; bytes *= 2) blocks.push_back(cache.allocate_async(bytes, fake_stream(3)));
  std::size_t bytes = 256;
  for (void* p : blocks) {
    cache.deallocate_async(p, bytes, fake_stream(3));
    bytes *= 2;
  }
  EXPECT_GT(cache.statistics().cached_bytes, mebibyte);
  EXPECT_EQ(cache.statistics().cached_blocks, blocks.size());
  cache.release();
  EXPECT_EQ(cache.statistics().cached_bytes, 0u);
  EXPECT_EQ(cache.statistics().cached_blocks, 0u);
  EXPECT_EQ(upstream.used_bytes(), 0u);
}

TEST(CachingResource, DestructionReturnsTheCacheUpstream) {
  host_memory_resource upstream;
  {
    caching_resource cache(upstream);
    cache.deallocate_async(cache.allocate_async(3000, fake_stream(1)), 3000, fake_stream(1));
    cache.deallocate(cache.allocate(3000), 3000);
    EXPECT_GT(upstream.used_bytes(), 0u);
  }
  EXPECT_EQ(upstream.used_bytes(), 0u);
}

TEST(CachingResource, LargeZeroAndOverAlignedRequestsBypassTheCache) {
  host_memory_resource upstream;
  caching_resource cache(upstream, caching_options{.max_cached_block = 64 * 1024});
  void* large = cache.allocate_async(100 * 1024, fake_stream(1));
  EXPECT_EQ(upstream.used_bytes(), 100u * 1024);  // exact size: not rounded to a class
  cache.deallocate_async(large, 100 * 1024, fake_stream(1));
  void* aligned = cache.allocate_async(1000, 4096, fake_stream(1));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(aligned) % 4096, 0u);
  cache.deallocate_async(aligned, 1000, 4096, fake_stream(1));
  EXPECT_EQ(cache.allocate_async(0, fake_stream(1)), nullptr);
  EXPECT_EQ(upstream.used_bytes(), 0u);
  EXPECT_EQ(cache.statistics().cached_blocks, 0u);
}

TEST(CachingResource, RefusesBadAlignmentsOnBothPaths) {
  host_memory_resource upstream;
  caching_resource cache(upstream);
  EXPECT_THROW(static_cast<void>(cache.allocate_async(64, 3, fake_stream(1))), std::invalid_argument);
  EXPECT_THROW(static_cast<void>(cache.allocate(64, 48)), std::invalid_argument);
}

TEST(CachingResource, ExhaustionReleasesTheCacheAndRetries) {
  host_memory_resource upstream(4 * mebibyte);
  caching_resource cache(upstream);
  void* cached = cache.allocate_async(3 * mebibyte, fake_stream(1));
  cache.deallocate_async(cached, 3 * mebibyte, fake_stream(1));
  // A different size class on another stream: only the cached 3 MiB stand in the way.
  void* p = cache.allocate_async(2 * mebibyte + 1, fake_stream(2));
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(cache.statistics().cached_blocks, 0u);
  cache.deallocate_async(p, 2 * mebibyte + 1, fake_stream(2));
  EXPECT_THROW(static_cast<void>(cache.allocate_async(5 * mebibyte, fake_stream(2))), out_of_memory);
}

TEST(CachingResource, PerThreadDefaultStreamIsCachedPerThread) {
  host_memory_resource upstream;
  caching_resource cache(upstream);
  void* freed_by_main = cache.allocate_async(2048, cudaStreamPerThread);
  cache.deallocate_async(freed_by_main, 2048, cudaStreamPerThread);
  void* other_thread_got = nullptr;
  std::thread([&] { other_thread_got = cache.allocate_async(2048, cudaStreamPerThread); }).join();
  EXPECT_NE(other_thread_got, freed_by_main) << "cudaStreamPerThread is another stream in another thread";
  EXPECT_EQ(cache.allocate_async(2048, cudaStreamPerThread), freed_by_main);
  cache.deallocate_async(other_thread_got, 2048, cudaStreamPerThread);
  cache.deallocate_async(freed_by_main, 2048, cudaStreamPerThread);
}

TEST(CachingResource, SixteenThreadsOnTheirOwnStreamsNeverShareALiveBlock) {
  host_memory_resource upstream;
  caching_resource cache(upstream);
  std::mutex mutex;
  std::set<void*> live;
  std::atomic<int> clashes{0};
  std::vector<std::thread> threads;
  for (std::uintptr_t index = 1; index <= 16; ++index) {
    threads.emplace_back([&, index] {
      const stream_ref stream = fake_stream(index % 4 + 1);  // four threads per stream
      std::vector<std::pair<void*, std::size_t>> mine;
      for (std::size_t i = 0; i < 3000; ++i) {
        const std::size_t bytes = 256 + (i * 7919 + index * 104729) % 100000;
        void* p = (i % 3 == 0) ? cache.allocate(bytes) : cache.allocate_async(bytes, stream);
        {
          const std::lock_guard lock(mutex);
          clashes += !live.insert(p).second;
        }
        mine.emplace_back(p, bytes);
        if (mine.size() > 6) {
          const auto [freed, freed_bytes] = mine.front();
          mine.erase(mine.begin());
          {
            const std::lock_guard lock(mutex);
            live.erase(freed);
          }
          cache.deallocate_async(freed, freed_bytes, stream);
        }
      }
      for (const auto& [freed, freed_bytes] : mine) {
        {
          const std::lock_guard lock(mutex);
          live.erase(freed);
        }
        cache.deallocate_async(freed, freed_bytes, stream);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(clashes.load(), 0);
  cache.release();
  EXPECT_EQ(upstream.used_bytes(), 0u);
}

// ---- on the GPU ----------------------------------------------------------------

TEST(CachingResourceOnGpu, AFreeOnOneStreamIsNotReusedByAnotherWhileItsKernelRuns) {
  CUDAPMR_REQUIRE_GPU();
  device_memory_resource device_memory(0, device_pool_options{});
  caching_resource cache(device_memory);
  const cudapmr::stream first(0);
  const cudapmr::stream second(0);
  constexpr std::size_t count = 16 << 20;  // 64 MiB: the kernels take a while
  auto* words = static_cast<std::uint32_t*>(cache.allocate_async(count * 4, first));
  write_sequence(words, count, 1, first);
  add_to_each(words, count, 1, first);  // still queued or running when the free is
  cache.deallocate_async(words, count * 4, first);
  auto* other = static_cast<std::uint32_t*>(cache.allocate_async(count * 4, second));
  EXPECT_NE(other, words);
  write_sequence(other, count, 500, second);
  EXPECT_EQ(count_sequence_mismatches(other, count, 500, second), 0u);
  cache.deallocate_async(other, count * 4, second);
  // The same stream reuses at once, ordered after its own earlier work.
  auto* again = static_cast<std::uint32_t*>(cache.allocate_async(count * 4, first));
  EXPECT_EQ(again, words);
  EXPECT_EQ(count_sequence_mismatches(again, count, 2, first), 0u);
  cache.deallocate_async(again, count * 4, first);
}

TEST(CachingResourceOnGpu, ReleaseAfterAStreamIsDestroyedIsSafe) {
  CUDAPMR_REQUIRE_GPU();
  device_memory_resource device_memory(0, device_pool_options{});
  caching_resource cache(device_memory);
  {
    const cudapmr::stream short_lived(0);
    void* p = cache.allocate_async(mebibyte, short_lived);
    write_sequence(static_cast<std::uint32_t*>(p), mebibyte / 4, 3, short_lived);
    cache.deallocate_async(p, mebibyte, short_lived);
  }
  cache.release();
  device_memory.bound_stream().wait();
  EXPECT_EQ(device_memory.stats().used_current, 0u);
}

TEST(CachingResourceOnGpu, PmrPathOverEachKindIsReadyAtOnce) {
  CUDAPMR_REQUIRE_GPU();
  pinned_memory_resource pinned;
  managed_memory_resource managed;
  for (stream_ordered_resource* upstream : {static_cast<stream_ordered_resource*>(&pinned),
                                            static_cast<stream_ordered_resource*>(&managed)}) {
    caching_resource cache(*upstream);
    const cudapmr::stream stream(0);
    for (int round = 0; round < 3; ++round) {
      auto* words = static_cast<std::uint32_t*>(cache.allocate(4096 * 4));
      for (std::uint32_t i = 0; i < 4096; ++i) words[i] = 9 + i;  // the host, at once
      mark_initialized(words, 4096 * 4, stream);  // host stores initcheck does not see
      EXPECT_EQ(count_sequence_mismatches(words, 4096, 9, stream), 0u) << upstream->description();
      cache.deallocate(words, 4096 * 4);
    }
    EXPECT_EQ(cache.statistics().hits, 2u);
  }
}

}  // namespace
}  // namespace cudapmr::test
