// SPDX-License-Identifier: Apache-2.0
// caching_resource: reuse on one stream, reuse across streams only in order,
// the budget, cold classes, capture, release, exhaustion, threads. Host tests
// use the host resource with made-up stream handles (it ignores streams; the
// cache keys on them) and a stand-in for CUDA's events where ordering matters.
#include "support/resource_contract.hpp"
#include "support/fake_ordering.hpp"
#include "support/resource_cases.hpp"
#include "support/stack_shape.hpp"

#include <cudapmr/adaptors/caching_resource.hpp>
#include <cudapmr/adaptors/coalescing_resource.hpp>
#include <cudapmr/adaptors/statistics_adaptor.hpp>
#include <cudapmr/device.hpp>
#include <cudapmr/device_malloc_resource.hpp>
#include <cudapmr/device_memory_resource.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace cudapmr::test {
namespace {

/// Frees and reallocates on `stream` until the stream is past the frees a new stream seals.
void settle(caching_resource& cache, stream_ref stream, std::size_t bytes) {
  for (int i = 0; i < 4; ++i) cache.deallocate_async(cache.allocate_async(bytes, stream), bytes, stream);
}

/// Allocates `count` blocks of `bytes` on one stream, holds them for `hold`, then frees them all.
void hold_then_free(caching_resource& cache, std::size_t count, std::size_t bytes, std::chrono::milliseconds hold) {
  std::vector<void*> blocks(count);
  for (void*& p : blocks) p = cache.allocate_async(bytes, fake_stream(1));
  if (hold.count() != 0) std::this_thread::sleep_for(hold);
  for (void* p : blocks) cache.deallocate_async(p, bytes, fake_stream(1));
}

TEST(CachingResource, ReusesAFreedBlockOnTheSameStreamWithoutGoingUpstream) {
  host_memory_resource upstream;
  caching_resource cache(upstream);
  void* first = cache.allocate_async(1000, fake_stream(1));
  cache.deallocate_async(first, 1000, fake_stream(1));
  const std::size_t upstream_bytes = upstream.used_bytes();
  void* second = cache.allocate_async(980, fake_stream(1));  // same size class (897..1024)
  EXPECT_EQ(second, first);
  EXPECT_EQ(upstream.used_bytes(), upstream_bytes);
  const cache_statistics statistics = cache.statistics();
  EXPECT_EQ(statistics.hits, 1u);
  EXPECT_EQ(statistics.misses, 1u);
  cache.deallocate_async(second, 980, fake_stream(1));
}

TEST(CachingResource, WithCachingTurnedOffInTheEnvironmentEveryFreeGoesUpstream) {
  // CUDAPMR_NO_CACHING=1, read when a cache is made, is for tools that must see every free.
  ASSERT_EQ(::setenv("CUDAPMR_NO_CACHING", "1", 1), 0);
  host_memory_resource upstream;
  caching_resource cache(upstream);
  ASSERT_EQ(::unsetenv("CUDAPMR_NO_CACHING"), 0);
  void* block = cache.allocate_async(1000, fake_stream(1));
  cache.deallocate_async(block, 1000, fake_stream(1));
  EXPECT_EQ(upstream.used_bytes(), 0u) << "the free stayed in the cache";
  EXPECT_EQ(cache.statistics().cached_bytes, 0u);
  void* again = cache.allocate_async(1000, fake_stream(1));
  EXPECT_EQ(cache.statistics().misses, 2u);
  cache.deallocate_async(again, 1000, fake_stream(1));
  caching_resource caching_again(upstream);  // made with the variable unset: caches
  caching_again.deallocate_async(caching_again.allocate_async(1000, fake_stream(1)), 1000, fake_stream(1));
  EXPECT_EQ(caching_again.statistics().cached_bytes, 1024u);
}

TEST(CachingResource, AnotherStreamWaitsForTheEventRecordedAtTheFree) {
  host_memory_resource upstream;
  fake_ordering ordering;
  caching_resource cache(upstream, {}, ordering);
  void* on_first = cache.allocate_async(4096, fake_stream(1));
  cache.deallocate_async(on_first, 4096, fake_stream(1));  // a new stream seals its frees
  ASSERT_EQ(ordering.events.size(), 1u);
  EXPECT_EQ(ordering.events[0]->stream, fake_stream(1));
  void* on_second = cache.allocate_async(4096, fake_stream(2));
  EXPECT_EQ(on_second, on_first);
  ASSERT_EQ(ordering.waits.size(), 1u) << "the free on stream 1 may not have completed";
  EXPECT_EQ(ordering.waits[0], std::make_pair(fake_stream(2), fake_stream(1)));
  EXPECT_EQ(cache.statistics().cross_stream_reuses, 1u);
  cache.deallocate_async(on_second, 4096, fake_stream(2));
}

TEST(CachingResource, ACompletedEventNeedsNoWait) {
  host_memory_resource upstream;
  fake_ordering ordering;
  caching_resource cache(upstream, {}, ordering);
  void* p = cache.allocate_async(4096, fake_stream(1));
  cache.deallocate_async(p, 4096, fake_stream(1));
  ordering.complete_all();
  EXPECT_EQ(cache.allocate_async(4096, fake_stream(2)), p);
  EXPECT_TRUE(ordering.waits.empty());
  cache.deallocate_async(p, 4096, fake_stream(2));
}

TEST(CachingResource, BlocksAStreamSealedGoBackOnItWithoutAWait) {
  host_memory_resource upstream;
  fake_ordering ordering;
  caching_resource cache(upstream, {}, ordering);
  void* mine = cache.allocate_async(4096, fake_stream(1));
  void* theirs = cache.allocate_async(8192, fake_stream(2));
  cache.deallocate_async(mine, 4096, fake_stream(1));  // a new stream seals its frees
  cache.deallocate_async(theirs, 8192, fake_stream(2));
  ASSERT_EQ(ordering.events.size(), 2u);
  cache.trim(fake_stream(1));  // both go upstream on stream 1: only stream 2's free is out of its order
  ASSERT_EQ(ordering.waits.size(), 1u) << "stream 1 waited for its own seal, or not for stream 2's";
  EXPECT_EQ(ordering.waits[0], std::make_pair(fake_stream(1), fake_stream(2)));
  EXPECT_EQ(upstream.used_bytes(), 0u);
}

TEST(CachingResource, AnUnsealedFreeNeverReachesAnotherStream) {
  host_memory_resource upstream;
  fake_ordering ordering;
  caching_resource cache(upstream, {}, ordering);
  settle(cache, fake_stream(1), 4096);
  const std::size_t events = ordering.events.size();
  void* p = cache.allocate_async(4096, fake_stream(1));
  cache.deallocate_async(p, 4096, fake_stream(1));  // an old stream, no demand: no event
  EXPECT_EQ(ordering.events.size(), events);
  void* on_other = cache.allocate_async(4096, fake_stream(2));
  EXPECT_NE(on_other, p);
  EXPECT_EQ(cache.allocate_async(4096, fake_stream(1)), p);  // its own stream reuses it at once
  cache.deallocate_async(on_other, 4096, fake_stream(2));
  cache.deallocate_async(p, 4096, fake_stream(1));
  cache.release();
  EXPECT_EQ(upstream.used_bytes(), 0u);
}

TEST(CachingResource, AStreamReusingItsOwnFreesRecordsNoEvents) {
  host_memory_resource upstream;
  fake_ordering ordering;
  caching_resource cache(upstream, {}, ordering);
  settle(cache, fake_stream(1), 64 * 1024);
  const std::size_t events = ordering.events.size();
  for (int i = 0; i < 1000; ++i) settle(cache, fake_stream(1), 64 * 1024);
  EXPECT_EQ(ordering.events.size(), events);
  EXPECT_EQ(cache.statistics().misses, 1u);
}

TEST(CachingResource, AStreamThatMissedAndWentAwayDoesNotMakeOthersRecordEvents) {
  // A stream's miss asks the others to seal their frees for it. If that stream
  // never allocates again (destroyed right after its miss), the request must
  // lapse after a few seals: else every other stream records an event at every
  // free, forever (the 16-thread benchmark then stalls).
  host_memory_resource upstream;
  fake_ordering ordering;
  caching_resource cache(upstream, {}, ordering);
  settle(cache, fake_stream(1), 64 * 1024);
  void* gone = cache.allocate_async(mebibyte, fake_stream(2));  // a miss, and stream 2 is never seen again
  settle(cache, fake_stream(1), 64 * 1024);
  const std::size_t events = ordering.events.size();
  for (int i = 0; i < 1000; ++i) settle(cache, fake_stream(1), 64 * 1024);
  EXPECT_LE(ordering.events.size(), events + 16);
  EXPECT_EQ(cache.statistics().misses, 2u);
  cache.deallocate_async(gone, mebibyte, fake_stream(1));
}

TEST(CachingResource, ProducerConsumerStreamsShareOneBlock) {
  // Allocate on stream A, free on stream B: the consumer's frees must come back
  // to the producer, or the cache takes a block per iteration.
  host_memory_resource upstream;
  fake_ordering ordering;
  caching_resource cache(upstream, {}, ordering);
  for (int i = 0; i < 10000; ++i) {
    void* p = cache.allocate_async(mebibyte, fake_stream(1));
    cache.deallocate_async(p, mebibyte, fake_stream(2));
    if (i % 7 == 0) ordering.complete_all();  // some frees have completed by the next allocation
  }
  EXPECT_LE(upstream.used_bytes(), 2 * mebibyte);
  EXPECT_LE(cache.statistics().misses, 2u);
  cache.release();
  EXPECT_EQ(upstream.used_bytes(), 0u);
}

TEST(CachingResource, DefaultStreamsOfTwoDevicesAreTwoStreams) {
  host_memory_resource upstream;
  fake_ordering ordering;
  caching_resource cache(upstream, {}, ordering);
  for (const cudaStream_t stream : {cudaStream_t{}, cudaStreamLegacy, cudaStreamPerThread}) {
    ordering.device = 0;
    settle(cache, stream, 8192);
    void* p = cache.allocate_async(8192, stream);
    cache.deallocate_async(p, 8192, stream);  // unsealed: reusable only on device 0's stream
    ordering.device = 1;
    const std::size_t waits = ordering.waits.size();
    void* on_device1 = cache.allocate_async(8192, stream);
    if (on_device1 == p) {  // then only after device 0's stream, through its event
      EXPECT_EQ(ordering.waits.size(), waits + 1) << "stream " << stream << " of device 1 is not device 0's";
    }
    cache.deallocate_async(on_device1, 8192, stream);
    ordering.device = 0;
    EXPECT_EQ(cache.allocate_async(8192, stream), p);
    cache.deallocate_async(p, 8192, stream);
  }
  cache.release();
}

TEST(CachingResource, ReleaseSynchronizesEveryDeviceForUnsealedBlocks) {
  // Blocks freed on streams of other devices (peer or managed memory) are idle
  // only once those devices are: release may not wait for its own device alone.
  host_memory_resource upstream;
  fake_ordering ordering;
  caching_resource cache(upstream, {}, ordering);
  settle(cache, fake_stream(1), 4096);
  cache.deallocate_async(cache.allocate_async(4096, fake_stream(1)), 4096, fake_stream(1));
  cache.release();
  EXPECT_EQ(ordering.device_synchronizations, 1);
  EXPECT_EQ(upstream.used_bytes(), 0u);
  cache.release();  // nothing held: nothing to wait for
  EXPECT_EQ(ordering.device_synchronizations, 1);
}

TEST(CachingResource, ReleaseWithoutWaitingLeavesOnlyOtherStreamsUnsealedBlocks) {
  // At a program's end a wait may never return: blocks that need one stay.
  host_memory_resource upstream;
  fake_ordering ordering;
  caching_resource cache(upstream, {}, ordering);
  settle(cache, fake_stream(1), 4096);
  cache.release();
  // Sizes an octave apart or more: neither block may serve the other's request.
  void* bound = cache.allocate_async(65536, cache.bound_stream());
  cache.deallocate_async(bound, 65536, cache.bound_stream());
  cache.deallocate_async(cache.allocate_async(4096, fake_stream(1)), 4096, fake_stream(1));
  ASSERT_EQ(upstream.used_bytes(), 65536u + 4096u);
  const int synchronizations = ordering.synchronizations();
  cache.release_without_waiting();
  EXPECT_EQ(upstream.used_bytes(), 4096u) << "the bound stream's own block went back; stream 1's unsealed one stays";
  EXPECT_EQ(ordering.synchronizations(), synchronizations);
  cache.release();
  EXPECT_EQ(upstream.used_bytes(), 0u);
}

TEST(CachingResource, ABlockFreedWhileReleaseWaitsStaysCachedUntilItIsOrdered) {
  // release() waits for every device only for the blocks it has taken: one
  // that another thread frees meanwhile may still be written by that stream's
  // work, and may not go upstream on the bound stream without a wait.
  host_memory_resource upstream;
  fake_ordering ordering;
  caching_resource cache(upstream, {}, ordering);
  settle(cache, fake_stream(1), 4096);
  cache.release();
  void* freed_before = cache.allocate_async(4096, fake_stream(1));
  void* freed_during = cache.allocate_async(4096, fake_stream(1));
  cache.deallocate_async(freed_before, 4096, fake_stream(1));
  ordering.during_synchronize = [&] { cache.deallocate_async(freed_during, 4096, fake_stream(1)); };
  const int synchronizations = ordering.device_synchronizations;
  cache.release();
  ASSERT_EQ(ordering.device_synchronizations, synchronizations + 1);
  EXPECT_EQ(cache.statistics().cached_blocks, 1u);
  EXPECT_EQ(upstream.used_bytes(), 4096u);
  cache.release();  // now it is ordered by a second wait
  EXPECT_EQ(ordering.device_synchronizations, synchronizations + 2);
  EXPECT_EQ(upstream.used_bytes(), 0u);
}

TEST(CachingResource, AHugeMaxCachedBlockIsCappedAtTheLargestClass) {
  host_memory_resource upstream(64 * mebibyte);
  caching_resource cache(upstream, caching_options{.max_cached_block = std::numeric_limits<std::size_t>::max()});
  EXPECT_EQ(cache.options().max_cached_block, largest_cached_block);
  for (const std::size_t bytes : {largest_cached_block, largest_cached_block + 1, largest_cached_block * 2,
                                  std::numeric_limits<std::size_t>::max() / 2}) {
    EXPECT_THROW(static_cast<void>(cache.allocate_async(bytes, fake_stream(1))), out_of_memory) << bytes;
    EXPECT_THROW(static_cast<void>(cache.allocate(bytes)), out_of_memory) << bytes;
  }
  void* p = cache.allocate_async(mebibyte, fake_stream(1));
  cache.deallocate_async(p, mebibyte, fake_stream(1));
  EXPECT_EQ(cache.statistics().cached_blocks, 1u);
}

TEST(CachingResource, CaptureGoesUpstreamNotIntoTheCache) {
  host_memory_resource upstream;
  fake_ordering ordering;
  caching_resource cache(upstream, {}, ordering);
  settle(cache, fake_stream(1), 4096);
  void* cached = cache.allocate_async(4096, fake_stream(1));
  cache.deallocate_async(cached, 4096, fake_stream(1));
  ordering.captured.insert(fake_stream(1));
  void* in_graph = cache.allocate_async(4096, fake_stream(1));
  EXPECT_NE(in_graph, cached) << "a cached block entered a graph being captured";
  const std::size_t used = upstream.used_bytes();
  cache.deallocate_async(in_graph, 4096, fake_stream(1));
  EXPECT_LT(upstream.used_bytes(), used) << "a block freed during capture went into the cache";
  EXPECT_EQ(cache.statistics().cached_blocks, 1u);
  ordering.captured.clear();
  EXPECT_EQ(cache.state().used_bytes, 0u) << "the block freed during capture is live no more";
  EXPECT_EQ(cache.allocate_async(4096, fake_stream(1)), cached);
  cache.deallocate_async(cached, 4096, fake_stream(1));
  EXPECT_EQ(cache.state().used_bytes, 0u);
}

TEST(CachingResource, ABlockAllocatedDuringCaptureGoesUpstreamAtItsFreeAfterTheCapture) {
  // A graph's allocation keeps its address at every launch: cached, it would
  // be handed to someone else while the next launch writes it.
  host_memory_resource upstream;
  fake_ordering ordering;
  caching_resource cache(upstream, {}, ordering);
  ordering.captured.insert(fake_stream(1));
  void* freed_in_order = cache.allocate_async(1000, fake_stream(1));
  void* freed_through_pmr = cache.allocate_async(1000, fake_stream(1));
  EXPECT_EQ(upstream.used_bytes(), 2048u) << "whole size classes, as on any miss";
  EXPECT_EQ(cache.state().used_bytes, 2048u) << "a graph's blocks are live as their classes";
  ordering.captured.clear();
  cache.deallocate_async(freed_in_order, 1000, fake_stream(1));
  cache.deallocate(freed_through_pmr, 1000);
  EXPECT_EQ(upstream.used_bytes(), 0u);
  EXPECT_EQ(cache.state().used_bytes, 0u);
  EXPECT_EQ(cache.statistics().cached_blocks, 0u);
}

TEST(CachingResource, APmrFreeWhileTheHandedOutBoundStreamIsCapturedGoesUpstream) {
  // Once handed out, the bound stream may be captured; a pmr free then is a
  // free on a captured stream: cached, the block would be handed out again
  // while the graph's launches still use it.
  host_memory_resource upstream;
  fake_ordering ordering;
  caching_resource cache(upstream, {}, ordering);
  const stream_ref bound = cache.bound_stream();
  void* p = cache.allocate(4096);
  const std::size_t used = upstream.used_bytes();
  ordering.captured.insert(bound.get());
  cache.deallocate(p, 4096);
  EXPECT_EQ(cache.statistics().cached_blocks, 0u) << "a block freed during the bound stream's capture was cached";
  EXPECT_LT(upstream.used_bytes(), used) << "the block did not go upstream";
  ordering.captured.clear();
  EXPECT_EQ(cache.state().used_bytes, 0u);
}

TEST(CachingResource, AMissThatWouldGrowTheUpstreamTakesACachedBlockUpToTwiceItsClass) {
  host_memory_resource upstream;
  caching_resource cache(upstream);
  void* large = cache.allocate_async(3 * mebibyte, fake_stream(1));
  cache.deallocate_async(large, 3 * mebibyte, fake_stream(1));
  const std::size_t held = upstream.used_bytes();
  void* smaller = cache.allocate_async(2 * mebibyte + 1, fake_stream(1));  // class 2.5 MiB: none cached
  EXPECT_EQ(smaller, large);
  EXPECT_EQ(upstream.used_bytes(), held);
  EXPECT_EQ(cache.statistics().hits, 1u);
  EXPECT_EQ(cache.statistics().misses, 1u);
  EXPECT_EQ(cache.state().used_bytes, 3 * mebibyte) << "live as the larger class it came from";
  cache.deallocate_async(smaller, 2 * mebibyte + 1, fake_stream(1));
  EXPECT_EQ(cache.state().used_bytes, 0u);
  // Freed, the block is back in its own class, and leaves with its own size.
  void* again = cache.allocate_async(3 * mebibyte, fake_stream(1));
  EXPECT_EQ(again, large);
  cache.deallocate_async(again, 3 * mebibyte, fake_stream(1));
  cache.release();
  EXPECT_EQ(upstream.used_bytes(), 0u);
  // Four classes up is twice the 2.5 MiB class: 5 MiB serves it, 6 MiB does not.
  for (const std::size_t cached : {5 * mebibyte, 6 * mebibyte}) {
    cache.release();
    cache.deallocate_async(cache.allocate_async(cached, fake_stream(1)), cached, fake_stream(1));
    const std::uint64_t hits = cache.statistics().hits;
    void* asked = cache.allocate_async(2 * mebibyte + 1, fake_stream(1));
    EXPECT_EQ(cache.statistics().hits, cached == 5 * mebibyte ? hits + 1 : hits) << cached << " bytes cached";
    cache.deallocate_async(asked, 2 * mebibyte + 1, fake_stream(1));
  }
}

TEST(CachingResource, AMissWithinWhatTheUpstreamHeldBeforeTakesABlockOfItsClass) {
  // The upstream held 6 MiB; with 3 MiB cached and 2.5 MiB asked, it holds no more than before.
  host_memory_resource upstream;
  caching_resource cache(upstream, caching_options{.max_cached_bytes = 4 * mebibyte});
  void* first = cache.allocate_async(3 * mebibyte, fake_stream(1));
  void* second = cache.allocate_async(3 * mebibyte, fake_stream(1));
  cache.deallocate_async(first, 3 * mebibyte, fake_stream(1));
  cache.deallocate_async(second, 3 * mebibyte, fake_stream(1));  // past the budget: upstream
  ASSERT_EQ(cache.statistics().cached_blocks, 1u);
  EXPECT_EQ(cache.state().used_bytes, 0u) << "a refused free is live no more either";
  void* smaller = cache.allocate_async(2 * mebibyte + 1, fake_stream(1));
  EXPECT_EQ(cache.statistics().hits, 0u) << "the 3 MiB block served a 2.5 MiB class";
  EXPECT_EQ(cache.statistics().misses, 3u);
  EXPECT_EQ(upstream.used_bytes() - cache.statistics().cached_bytes, 5 * mebibyte / 2) << "live: one 2.5 MiB block";
  cache.deallocate_async(smaller, 2 * mebibyte + 1, fake_stream(1));
}

TEST(CachingResource, TheBudgetBoundsWhatIsCached) {
  host_memory_resource upstream;
  caching_resource cache(upstream, caching_options{.max_cached_bytes = 4 * mebibyte});
  std::vector<void*> blocks;
  for (int i = 0; i < 12; ++i) blocks.push_back(cache.allocate_async(mebibyte, fake_stream(1)));
  for (void* p : blocks) cache.deallocate_async(p, mebibyte, fake_stream(1));
  EXPECT_LE(cache.statistics().cached_bytes, 4 * mebibyte);
  EXPECT_LE(upstream.used_bytes(), 4 * mebibyte);
  EXPECT_EQ(cache.statistics().max_cached_bytes, 4 * mebibyte);
}

TEST(CachingResource, AGrowingWorkingSetLeavesNoTrailOfColdClasses) {
  // One live block growing by 10 %: each new size misses, and the classes left
  // behind go cold and back upstream.
  host_memory_resource upstream;
  caching_resource cache(upstream);
  std::size_t largest = 0;
  for (double size = mebibyte; size <= 64.0 * mebibyte; size *= 1.1) {
    const auto bytes = static_cast<std::size_t>(size);
    largest = bytes;
    for (int pair = 0; pair < 3; ++pair)
      cache.deallocate_async(cache.allocate_async(bytes, fake_stream(1)), bytes, fake_stream(1));
  }
  EXPECT_LE(upstream.used_bytes(), 3 * largest) << "cached " << cache.statistics().cached_blocks << " blocks";
}

TEST(CachingResource, AProgramThatWindsDownKeepsLittleCached) {
  // 20,000 blocks (312 MiB) live, then all freed: what the cache keeps follows
  // what was live lately down to a 64th of the budget, instead of filling the budget.
  host_memory_resource upstream;
  caching_resource cache(upstream, {.max_cached_bytes = 1024 * mebibyte, .shrink_interval = std::chrono::milliseconds(0)});
  constexpr std::size_t block = 16 << 10;
  std::vector<void*> blocks;
  for (int i = 0; i < 20000; ++i) blocks.push_back(cache.allocate_async(block, fake_stream(1)));
  std::size_t most_cached = 0;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    cache.deallocate_async(blocks[i], block, fake_stream(1));
    const std::size_t live = (blocks.size() - i - 1) * block;
    const std::size_t cached = cache.statistics().cached_bytes;
    // Never more than the peak (its own count lags by a 64th of the budget, 16 MiB).
    ASSERT_LE(cached + live, blocks.size() * block + 16 * mebibyte) << "after " << i + 1 << " frees";
    most_cached = std::max(most_cached, cached);
  }
  EXPECT_GE(most_cached, 64 * mebibyte);  // it did cache while the program held memory
  EXPECT_LE(cache.statistics().cached_bytes, 36 * mebibyte);  // the 16 MiB floor, the lag and a little
  EXPECT_LE(upstream.used_bytes(), 36 * mebibyte);
  void* again = cache.allocate_async(block, fake_stream(1));  // what it kept is reused
  EXPECT_GE(cache.statistics().hits, 1u);
  cache.deallocate_async(again, block, fake_stream(1));
}

TEST(CachingResource, AWorkingSetThatEbbsAndFlowsWithinTheShrinkIntervalKeepsItsBlocks) {
  // 64 blocks allocated and all freed, 200 times over: thousands of frees with
  // little live, yet within the interval, so the cache keeps them all.
  host_memory_resource upstream;
  caching_resource cache(upstream, {.max_cached_bytes = 256 * mebibyte, .shrink_interval = std::chrono::seconds(60)});
  for (int cycle = 0; cycle < 200; ++cycle) hold_then_free(cache, 64, mebibyte, std::chrono::milliseconds(0));
  EXPECT_EQ(cache.statistics().misses, 64u);
  EXPECT_EQ(upstream.used_bytes(), 64 * mebibyte);
}

TEST(CachingResource, EachCacheShrinksOnItsOwnFreesWhenAThreadFreesIntoSeveral) {
  // One thread freeing into two caches in turn: each cache's every 32nd free
  // below its peak looks at the clock. A counter shared by the thread's caches
  // fell on the same cache each time, and the other never shrank.
  host_memory_resource first_upstream, second_upstream;
  const caching_options options{.max_cached_bytes = 256 * mebibyte, .shrink_interval = std::chrono::milliseconds(0)};
  caching_resource first(first_upstream, options), second(second_upstream, options);
  std::vector<void*> first_blocks(256), second_blocks(256);
  for (std::size_t i = 0; i < 256; ++i) {
    first_blocks[i] = first.allocate_async(64 * 1024, fake_stream(1));
    second_blocks[i] = second.allocate_async(64 * 1024, fake_stream(1));
  }
  for (std::size_t i = 0; i < 256; ++i) {
    first.deallocate_async(first_blocks[i], 64 * 1024, fake_stream(1));
    second.deallocate_async(second_blocks[i], 64 * 1024, fake_stream(1));
  }
  // The program goes on with one block live in each: hundreds of frees below the peak.
  for (int i = 0; i < 512; ++i) {
    first.deallocate_async(first.allocate_async(64 * 1024, fake_stream(1)), 64 * 1024, fake_stream(1));
    second.deallocate_async(second.allocate_async(64 * 1024, fake_stream(1)), 64 * 1024, fake_stream(1));
  }
  // The floor, 4 MiB, and what the cache's own count may lag, 4 MiB (a 64th of the budget).
  EXPECT_LE(first_upstream.used_bytes(), 8 * mebibyte) << "16 MiB were live";
  EXPECT_LE(second_upstream.used_bytes(), 8 * mebibyte);
}

TEST(CachingResource, ABriefDipAfterALongStayAtThePeakKeepsTheBlocks) {
  // The interval runs from when what is live went below the peak, not from
  // the peak's last fall: a loop whose steps outlast the interval, dipping for
  // a moment between them, loses nothing.
  host_memory_resource upstream;
  caching_resource cache(upstream, {.max_cached_bytes = 256 * mebibyte, .shrink_interval = std::chrono::milliseconds(20)});
  for (int step = 0; step < 4; ++step) hold_then_free(cache, 64, mebibyte, std::chrono::milliseconds(30));
  EXPECT_EQ(cache.statistics().misses, 64u);
}

TEST(CachingResource, ABudgetPastTheSignedRangeStillCaches) {
  // SIZE_MAX for "no bound" must not wrap to a negative budget that refuses every block.
  host_memory_resource upstream;
  caching_resource cache(upstream, {.max_cached_bytes = std::numeric_limits<std::size_t>::max()});
  for (int i = 0; i < 10; ++i)
    cache.deallocate_async(cache.allocate_async(mebibyte, fake_stream(1)), mebibyte, fake_stream(1));
  EXPECT_EQ(cache.statistics().misses, 1u);
  EXPECT_EQ(cache.statistics().hits, 9u);
}

TEST(CachingResource, ANegativeShrinkIntervalIsRefusedByName) {
  host_memory_resource upstream;
  try {
    caching_resource cache(upstream, {.shrink_interval = std::chrono::milliseconds(-5)});
    FAIL() << "a negative interval was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("shrink_interval of -5 ms"), std::string::npos) << error.what();
  }
}

TEST(CachingResource, FollowingWhatIsLiveAProgramThatFreesAllLeavesTheFloor) {
  host_memory_resource upstream;
  constexpr std::size_t budget = 256 * mebibyte;  // floor: a 64th, 4 MiB
  for (const std::optional<double> per_live : {std::optional<double>{}, std::optional<double>{2.0}}) {
    caching_resource cache(upstream, {.max_cached_bytes = budget, .max_cached_per_live = per_live});
    std::vector<void*> blocks;
    for (int i = 0; i < 64; ++i) blocks.push_back(cache.allocate_async(mebibyte, fake_stream(1)));
    for (void* p : blocks) cache.deallocate_async(p, mebibyte, fake_stream(1));
    if (per_live) {
      EXPECT_LE(cache.statistics().cached_bytes, budget / 64) << "at most the floor once nothing is live";
    } else {
      EXPECT_EQ(cache.statistics().cached_bytes, 64 * mebibyte) << "what was live lately stays cached";
    }
  }
}

TEST(CachingResource, AMaxCachedPerLiveThatIsNotAFinitePositiveNumberIsRefusedByName) {
  host_memory_resource upstream;
  for (const double bad : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    try {
      caching_resource cache(upstream, {.max_cached_per_live = bad});
      ADD_FAILURE() << "max_cached_per_live " << bad << " was accepted";
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find("max_cached_per_live of"), std::string::npos) << error.what();
    }
  }
}

TEST(CachingResource, ABigBlockFreedAndAllocatedAgainInALoopStaysCached) {
  // Nothing else is live: what was live a moment ago is what the cache keeps.
  host_memory_resource upstream;
  caching_resource cache(upstream, {.max_cached_bytes = 256 * mebibyte});
  for (int i = 0; i < 10; ++i)
    cache.deallocate_async(cache.allocate_async(64 * mebibyte, fake_stream(1)), 64 * mebibyte, fake_stream(1));
  EXPECT_EQ(cache.statistics().misses, 1u);
  EXPECT_EQ(cache.statistics().hits, 9u);
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

/// A pmr free on `cache` after its bound stream was handed out (by it or another
/// resource sharing the stream): stream 7 may get the block back only after waiting for that stream.
void expect_pmr_free_ordered_after_the_bound_stream(caching_resource& cache, fake_ordering& ordering) {
  EXPECT_TRUE(cache.bound_stream_shared());
  void* p = cache.allocate(5000);
  cache.deallocate(p, 5000);
  void* q = cache.allocate_async(5000, fake_stream(7));
  if (q == p) {
    ASSERT_EQ(ordering.waits.size(), 1u) << "stream 7 must wait for the bound stream's work";
    EXPECT_EQ(ordering.waits[0].first, fake_stream(7));
  }
  cache.deallocate_async(q, 5000, fake_stream(7));
  cache.release();
}

TEST(CachingResource, PmrFreesWaitForTheBoundStreamOnceItWasHandedOut) {
  host_memory_resource host;
  fake_ordering ordering;
  caching_resource cache(host, {}, ordering);
  EXPECT_FALSE(cache.bound_stream_shared());
  static_cast<void>(cache.bound_stream());  // from now on, work may be queued there
  expect_pmr_free_ordered_after_the_bound_stream(cache, ordering);
}

TEST(CachingResource, PmrFreesWaitForTheBoundStreamHandedOutByAnAdaptorAbove) {
  host_memory_resource host;
  fake_ordering ordering;
  caching_resource cache(host, {}, ordering);
  statistics_adaptor above(cache);
  static_cast<void>(above.bound_stream());  // the same stream as the cache's
  expect_pmr_free_ordered_after_the_bound_stream(cache, ordering);
}

TEST(CachingResource, PmrFreesWaitForTheBoundStreamHandedOutByASiblingOverTheSameUpstream) {
  host_memory_resource host;
  fake_ordering ordering;
  caching_resource cache(host, {}, ordering);
  statistics_adaptor sibling(host);
  static_cast<void>(sibling.bound_stream());
  expect_pmr_free_ordered_after_the_bound_stream(cache, ordering);
}

TEST(CachingResource, BlocksAreWholeSizeClassesAlignedTo256) {
  host_memory_resource upstream;
  caching_resource cache(upstream);
  void* p = cache.allocate_async(1000, fake_stream(1));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 256, 0u);
  EXPECT_EQ(upstream.used_bytes(), detail::size_class_bytes(detail::size_class_of(1000)));
  cache.deallocate_async(p, 1000, fake_stream(1));
}

TEST(CachingResource, SizeClassesFitEveryRequestWithinAQuarterOfIt) {
  std::size_t previous_class = 0;
  for (std::size_t bytes = 1; bytes <= (std::size_t{1} << 40); bytes += 1 + bytes / 61) {
    const std::size_t size_class = detail::size_class_of(bytes);
    ASSERT_LT(size_class, detail::size_class_count) << bytes;
    const std::size_t class_bytes = detail::size_class_bytes(size_class);
    ASSERT_GE(class_bytes, bytes);
    ASSERT_LE(class_bytes - bytes, std::max<std::size_t>(bytes / 4, 255)) << bytes;
    if (size_class > 0) {
      ASSERT_LT(detail::size_class_bytes(size_class - 1), bytes) << bytes;
    }
    ASSERT_GE(size_class, previous_class);
    ASSERT_EQ(class_bytes % 32, 0u);
    previous_class = size_class;
  }
  EXPECT_EQ(detail::size_class_of(std::size_t{1} << 40), detail::size_class_count - 1);
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

TEST(CachingResource, ReportsAsUsedWhatIsLiveWhetherCachedOrPassedUpstreamAndNothingOnceAllIsFreed) {
  // The default stack's front and engine, which round blocks differently:
  // what the stack reports used is the front's count, not the engine's.
  host_memory_resource leaf;
  fake_ordering ordering;
  stack_shape stack(leaf, ordering);
  const stream_ref stream = fake_stream(1);
  struct request {
    std::size_t bytes, alignment;
    bool pmr;
  };
  const std::vector<request> requests{{1, 1, false},          {300, 256, false},         {513, 64, true},
                                      {3 * mebibyte + 7, 256, false}, {1000, 4096, false}, {8 * mebibyte, 256, true},
                                      {5000, 2 * mebibyte, false}};
  std::vector<void*> blocks;
  std::size_t passed = 0;  // what goes upstream uncached counts as asked
  for (const request& each : requests) {
    blocks.push_back(each.pmr ? stack.front.allocate(each.bytes, each.alignment)
                              : stack.front.allocate_async(each.bytes, each.alignment, stream));
    if (each.alignment > 256 || each.bytes > 4 * mebibyte) passed += each.bytes;
  }
  const std::size_t used = stack.front.state().used_bytes.value_or(0);
  EXPECT_GE(used, passed + 1 + 300 + 513 + 3 * mebibyte + 7) << "each block counts at least what it was asked";
  EXPECT_LE(used, passed + (1 + 300 + 513 + 3 * mebibyte + 7) * 5 / 4 + 256) << "within a size class of it";
  for (std::size_t index = 0; index < requests.size(); ++index) {
    const request& each = requests[index];
    if (each.pmr) stack.front.deallocate(blocks[index], each.bytes, each.alignment);
    else stack.front.deallocate_async(blocks[index], each.bytes, each.alignment, stream);
  }
  EXPECT_EQ(stack.front.state().used_bytes, 0u) << "all freed: nothing is live, whatever the front caches";
  EXPECT_GT(stack.front.state().cached_bytes.value_or(0), 0u);
  EXPECT_GT(stack.engine.state().used_bytes.value_or(0), stack.front.state().cached_bytes.value_or(0))
      << "the engine counts the front's cached blocks as it rounds them (2 MiB steps past 1 MiB)";
}

/// A cache of blocks up to 64 KiB that hands its stream's blocks back before larger requests.
caching_options handing_back() { return {.max_cached_block = 64 * 1024, .hand_back_before_large = true}; }

/// One request too large to cache on `stream`, freed at once.
void large_request(caching_resource& cache, stream_ref stream) {
  cache.deallocate_async(cache.allocate_async(100 * 1024, stream), 100 * 1024, stream);
}

TEST(CachingResource, ALargeRequestHandsBackTheBlocksItsStreamFreedWhenAskedTo) {
  host_memory_resource upstream;
  fake_ordering ordering;
  caching_resource cache(upstream, handing_back(), ordering);
  settle(cache, fake_stream(1), 4096);
  settle(cache, fake_stream(2), 16384);
  ASSERT_EQ(upstream.used_bytes(), 4096u + 16384u);
  const std::size_t events = ordering.events.size();
  // Over-aligned but small: not a large request.
  cache.deallocate_async(cache.allocate_async(1000, 4096, fake_stream(1)), 1000, 4096, fake_stream(1));
  EXPECT_EQ(upstream.used_bytes(), 4096u + 16384u);
  void* large = cache.allocate_async(100 * 1024, fake_stream(1));
  EXPECT_EQ(upstream.used_bytes(), 100u * 1024 + 16384u) << "stream 1's block went back; stream 2's stays";
  EXPECT_EQ(cache.statistics().cached_bytes, 16384u);
  EXPECT_EQ(ordering.events.size(), events) << "in stream order: no event";
  EXPECT_EQ(ordering.synchronizations(), 0);
  cache.deallocate_async(large, 100 * 1024, fake_stream(1));
}

TEST(CachingResource, ALargeRequestHandsBackOnlyTheBlocksItsOwnStreamSealed) {
  host_memory_resource upstream;
  fake_ordering ordering;
  caching_resource cache(upstream, handing_back(), ordering);
  // A new stream's first frees are sealed (offered to other streams with an event).
  cache.deallocate_async(cache.allocate_async(32768, fake_stream(3)), 32768, fake_stream(3));
  cache.deallocate_async(cache.allocate_async(8192, fake_stream(4)), 8192, fake_stream(4));
  ASSERT_EQ(cache.statistics().events_recorded, 2u);
  large_request(cache, fake_stream(3));
  EXPECT_EQ(upstream.used_bytes(), 8192u) << "stream 3's sealed block went back; stream 4's stays";
  EXPECT_TRUE(ordering.waits.empty()) << "a stream's own seal needs no wait";
  EXPECT_EQ(ordering.recycled, 1u) << "the event of stream 3's seal, once its block was gone";
  EXPECT_EQ(ordering.synchronizations(), 0);
  // Stream 4's block still serves another stream, which waits for its event.
  void* reused = cache.allocate_async(8192, fake_stream(5));
  EXPECT_EQ(upstream.used_bytes(), 8192u);
  EXPECT_EQ(ordering.waits.size(), 1u);
  cache.deallocate_async(reused, 8192, fake_stream(5));
}

TEST(CachingResource, ALargeRequestLeavesTheCacheAloneByDefault) {
  host_memory_resource upstream;
  fake_ordering ordering;
  caching_resource cache(upstream, caching_options{.max_cached_block = 64 * 1024}, ordering);
  settle(cache, fake_stream(1), 4096);
  for (int i = 0; i < 3; ++i) large_request(cache, fake_stream(1));
  EXPECT_EQ(upstream.used_bytes(), 4096u);
  EXPECT_EQ(cache.statistics().cached_bytes, 4096u);
}

/// Eight 4 KiB blocks allocated and freed on stream 1 once it is settled;
/// returns the events the frees recorded.
std::uint64_t free_eight_blocks(caching_resource& cache) {
  settle(cache, fake_stream(1), 4096);
  const std::uint64_t before = cache.statistics().events_recorded;
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(cache.allocate_async(4096, fake_stream(1)));
  for (void* p : blocks) cache.deallocate_async(p, 4096, fake_stream(1));
  return cache.statistics().events_recorded - before;
}

/// The bytes a 4 KiB request on stream 2 takes from `upstream` once every event has completed.
std::size_t taken_upstream_by_another_stream(caching_resource& cache, host_memory_resource& upstream,
                                             fake_ordering& ordering) {
  for (const auto& event : ordering.events) event->completed = true;
  const std::size_t used = upstream.used_bytes();
  void* p = cache.allocate_async(4096, fake_stream(2));
  const std::size_t taken = upstream.used_bytes() - used;
  cache.deallocate_async(p, 4096, fake_stream(2));
  return taken;
}

TEST(CachingResource, PastItsStreamShareAStreamOffersWhatItFreedToEveryStream) {
  host_memory_resource upstream;
  fake_ordering ordering;
  caching_resource cache(upstream, caching_options{.stream_share = 16 * 1024}, ordering);
  EXPECT_EQ(free_eight_blocks(cache), 1u) << "past a 16 KiB share at the fifth free: one offer, of the five blocks held";
  // Stream 1 has gone quiet.
  EXPECT_EQ(taken_upstream_by_another_stream(cache, upstream, ordering), 0u)
      << "another stream went upstream beside the offered blocks";
  EXPECT_EQ(cache.statistics().cross_stream_reuses, 1u);
}

TEST(CachingResource, WithinItsStreamShareAStreamKeepsWhatItFreedToItself) {
  host_memory_resource upstream;
  fake_ordering ordering;
  caching_resource cache(upstream, caching_options{.stream_share = 64 * 1024}, ordering);
  EXPECT_EQ(free_eight_blocks(cache), 0u);
  EXPECT_EQ(taken_upstream_by_another_stream(cache, upstream, ordering), 4096u)
      << "the blocks were offered to other streams within the share";
}

TEST(CachingResource, AStreamShareIsPassedOnlyPastIt) {
  host_memory_resource upstream;
  fake_ordering ordering;
  // Eight 4 KiB frees make 32 KiB: at a 32 KiB share, not past it; past 28 KiB at the last free.
  caching_resource at_the_share(upstream, caching_options{.stream_share = 32 * 1024}, ordering);
  EXPECT_EQ(free_eight_blocks(at_the_share), 0u);
  caching_resource below_it(upstream, caching_options{.stream_share = 28 * 1024}, ordering);
  EXPECT_EQ(free_eight_blocks(below_it), 1u);
  caching_resource every_free(upstream, caching_options{.stream_share = 0}, ordering);
  EXPECT_EQ(free_eight_blocks(every_free), 8u);
  caching_resource by_default(upstream, caching_options{}, ordering);
  EXPECT_FALSE(by_default.options().stream_share) << "unset stays unset: the share follows what is live";
}

/// Stream 1 holds sixteen 4 MiB blocks after `streams` streams in all have
/// freed, then frees six of them (24 MiB); returns the events those frees
/// recorded. Before that, stream 1 frees 4 KiB blocks 128 times, after a
/// wait of `quiet` before each half.
std::uint64_t events_freeing_24_of_64_mib(std::size_t streams,
                                         caching_options options = {.max_cached_bytes = std::size_t{1} << 30},
                                         std::chrono::milliseconds quiet = {}) {
  host_memory_resource upstream;
  fake_ordering ordering;
  caching_resource cache(upstream, options, ordering);
  for (std::size_t s = 2; s <= streams; ++s) settle(cache, fake_stream(s), 4096);
  for (int half = 0; half < 2; ++half) {
    std::this_thread::sleep_for(quiet);
    for (int i = 0; i < 64; ++i) cache.deallocate_async(cache.allocate_async(4096, fake_stream(1)), 4096, fake_stream(1));
  }
  settle(cache, fake_stream(1), 4 * mebibyte);
  std::vector<void*> blocks;
  for (int i = 0; i < 16; ++i) blocks.push_back(cache.allocate_async(4 * mebibyte, fake_stream(1)));
  const std::uint64_t before = cache.statistics().events_recorded;
  for (std::size_t i = 0; i < 6; ++i) cache.deallocate_async(blocks[i], 4 * mebibyte, fake_stream(1));
  const std::uint64_t events = cache.statistics().events_recorded - before;
  for (std::size_t i = 6; i < 16; ++i) cache.deallocate_async(blocks[i], 4 * mebibyte, fake_stream(1));
  return events;
}

TEST(CachingResource, UnsetAStreamsShareIsHalfWhatIsLiveSplitAmongTheStreamsFreeing) {
  // 64 MiB live: one stream's share is 32 MiB, so its 24 MiB of frees stay its own.
  EXPECT_EQ(events_freeing_24_of_64_mib(1), 0u);
  // Two streams: 16 MiB, passed at the fifth free; four: 8 MiB, at the third and the sixth.
  EXPECT_EQ(events_freeing_24_of_64_mib(2), 1u);
  EXPECT_EQ(events_freeing_24_of_64_mib(4), 2u);
  // Sixteen: 2 MiB each, raised to the 4 MiB least; passed at every second free.
  EXPECT_EQ(events_freeing_24_of_64_mib(16), 3u);
  // At most an eighth of the budget: 16 MiB of 128 for one stream, passed at the fifth free.
  EXPECT_EQ(events_freeing_24_of_64_mib(1, {.max_cached_bytes = std::size_t{128} << 20}), 1u);
  // A share set is kept whatever the streams.
  EXPECT_EQ(events_freeing_24_of_64_mib(16, {.max_cached_bytes = std::size_t{1} << 30, .stream_share = 128 * mebibyte}),
            0u);
}

TEST(CachingResource, AStreamQuietForTwoFreeingWindowsNoLongerSplitsTheShare) {
  // The fifteen other streams freed, then only stream 1 did for over two
  // seconds (a window is one): the share is one stream's again.
  EXPECT_EQ(events_freeing_24_of_64_mib(16, {.max_cached_bytes = std::size_t{1} << 30}, std::chrono::milliseconds(1100)),
            0u);
}

TEST(CachingResource, SixteenQuietStreamsLeaveTheStackLittleAsTheirShareFollowsWhatIsLive) {
  // The default stack's shape over a host leaf: sixteen streams allocate
  // and free (one block in eight freed by the next stream), then all go
  // quiet. With the default share, a sixteenth of half what is live, a
  // stream's frees are offered to the others and to their trims, so what the
  // front keeps and the engine grows to stay nearer what was live; with a
  // share of an eighth of the budget (the default before) each quiet stream
  // keeps its own. Four seeds summed: one run's margin depends on its sizes.
  struct held {
    std::size_t reserved_peak = 0;
    std::size_t cached_at_end = 0;
  };
  const auto run = [](std::optional<std::size_t> share, std::uint64_t seed) {
    host_memory_resource leaf;
    fake_ordering ordering;
    device_stack_options options;
    options.front.stream_share = share;
    stack_shape stack(leaf, ordering, options);
    std::mt19937_64 random(seed);
    std::vector<std::vector<std::pair<void*, std::size_t>>> live(16);
    for (int step = 0; step < 2000; ++step) {  // as many as the memory bench's replay
      for (std::size_t s = 0; s < live.size(); ++s) {
        if (live[s].size() >= 8) {
          const std::size_t victim = random() % live[s].size();
          const std::size_t freer = random() % 8 == 0 ? (s + 1) % live.size() : s;
          stack.front.deallocate_async(live[s][victim].first, live[s][victim].second, fake_stream(freer + 1));
          live[s].erase(live[s].begin() + static_cast<std::ptrdiff_t>(victim));
        }
        const std::size_t bytes = 1 + random() % (4 * mebibyte);
        live[s].emplace_back(stack.front.allocate_async(bytes, fake_stream(s + 1)), bytes);
      }
      for (const auto& event : ordering.events) event->completed = true;  // the GPU keeps up
    }
    for (std::size_t s = 0; s < live.size(); ++s)
      for (const auto& [p, bytes] : live[s]) stack.front.deallocate_async(p, bytes, fake_stream(s + 1));
    return held{stack.engine.statistics().reserved_peak, stack.front.statistics().cached_bytes};
  };
  const std::size_t eighth_of_budget = [] {
    host_memory_resource leaf;
    fake_ordering ordering;
    return *stack_shape(leaf, ordering).front.options().max_cached_bytes / 8;
  }();
  held by_default;
  held eighth;
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    const held followed = run(std::nullopt, seed);
    const held fixed = run(eighth_of_budget, seed);
    by_default.reserved_peak += followed.reserved_peak;
    by_default.cached_at_end += followed.cached_at_end;
    eighth.reserved_peak += fixed.reserved_peak;
    eighth.cached_at_end += fixed.cached_at_end;
  }
  EXPECT_LT(by_default.reserved_peak * 5, eighth.reserved_peak * 4)
      << by_default.reserved_peak << " against " << eighth.reserved_peak;
  EXPECT_LT(by_default.cached_at_end * 3, eighth.cached_at_end * 2)
      << by_default.cached_at_end << " against " << eighth.cached_at_end;
}

TEST(CachingResource, OverTheStacksEngineALargeRequestReusesWhatTheFrontHeldInsteadOfGrowing) {
  // The default stack's front and engine: blocks of one step's sizes, freed
  // into the front, merge in the engine and serve the next step's large
  // request from the segment they came from.
  host_memory_resource leaf;
  fake_ordering ordering;
  stack_shape stack(leaf, ordering);
  const stream_ref stream = fake_stream(1);
  stack.engine.deallocate_async(stack.engine.allocate_async(16 * mebibyte, stream), 16 * mebibyte, stream);
  ASSERT_EQ(stack.engine.statistics().reserved_bytes, 16 * mebibyte);
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(stack.front.allocate_async(3 * mebibyte, stream));
  for (void* p : blocks) stack.front.deallocate_async(p, 3 * mebibyte, stream);
  ASSERT_EQ(stack.front.statistics().cached_bytes, 12 * mebibyte);
  void* large = stack.front.allocate_async(14 * mebibyte, stream);
  EXPECT_EQ(stack.engine.statistics().reserved_bytes, 16 * mebibyte) << "the engine grew beside the front's blocks";
  EXPECT_EQ(stack.front.statistics().cached_bytes, 0u);
  stack.front.deallocate_async(large, 14 * mebibyte, stream);
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

/// A pool's reserve in miniature: what is freed stays reserved (the host's
/// capacity still counts it) until `trim` gives it back.
class reserving_resource final : public resource_adaptor {
 public:
  explicit reserving_resource(host_memory_resource& host) : resource_adaptor(host) {}
  ~reserving_resource() override { trim(stream_ref(cudaStream_t{})); }
  [[nodiscard]] std::string description() const override { return describe_as("reserving_resource"); }
  [[nodiscard]] std::size_t trims() const noexcept { return trims_; }

 private:
  void* do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) override {
    return upstream_resource().allocate_async(bytes, alignment, stream);
  }
  void do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref) noexcept override {
    const std::lock_guard lock(mutex_);
    reserve_.push_back({p, bytes, alignment});
  }
  void do_trim(stream_ref stream) override {
    const std::lock_guard lock(mutex_);
    ++trims_;
    for (const auto& [p, bytes, alignment] : reserve_) upstream_resource().deallocate_async(p, bytes, alignment, stream);
    reserve_.clear();
  }
  struct reserved {
    void* pointer;
    std::size_t bytes;
    std::size_t alignment;
  };
  std::mutex mutex_;
  std::vector<reserved> reserve_;
  std::size_t trims_ = 0;
};

TEST(CachingResource, ARequestTooLargeToCacheGetsWhatTheCacheAndTheUpstreamHoldUnused) {
  // A burst to 60 % of the memory, all freed; then 90 % in one request, past
  // the largest cached block: the cache and the pool's reserve must go back first.
  host_memory_resource host(64 * mebibyte);
  reserving_resource pool(host);
  caching_resource cache(pool, caching_options{.max_cached_block = 4 * mebibyte});
  std::vector<void*> burst;
  for (int i = 0; i < 9; ++i) burst.push_back(cache.allocate_async(4 * mebibyte, fake_stream(1)));
  for (void* p : burst) cache.deallocate_async(p, 4 * mebibyte, fake_stream(1));
  ASSERT_GT(cache.statistics().cached_bytes, 0u);
  void* whole = cache.allocate_async(57 * mebibyte, fake_stream(2));
  EXPECT_EQ(host.used_bytes(), 57 * mebibyte);
  EXPECT_EQ(cache.statistics().cached_bytes, 0u);
  EXPECT_EQ(pool.trims(), 1u);
  cache.deallocate_async(whole, 57 * mebibyte, fake_stream(2));
  cache.trim(fake_stream(2));  // what a program that goes idle calls
  EXPECT_EQ(host.used_bytes(), 0u);
}

TEST(CachingResource, ACacheableRequestTrimsTheUpstreamBeforeItFails) {
  host_memory_resource host(16 * mebibyte);
  reserving_resource pool(host);
  caching_resource cache(pool);
  cache.deallocate_async(cache.allocate_async(10 * mebibyte, fake_stream(1)), 10 * mebibyte, fake_stream(1));
  cache.release();  // the block is in the pool's reserve now, not in the cache
  void* p = cache.allocate_async(12 * mebibyte, fake_stream(1));
  EXPECT_EQ(pool.trims(), 1u);
  cache.deallocate_async(p, 12 * mebibyte, fake_stream(1));
}

TEST(CachingResource, PerThreadDefaultStreamIsCachedPerThread) {
  host_memory_resource upstream;
  fake_ordering ordering;
  caching_resource cache(upstream, {}, ordering);
  settle(cache, cudaStreamPerThread, 2048);
  void* freed_by_main = cache.allocate_async(2048, cudaStreamPerThread);
  cache.deallocate_async(freed_by_main, 2048, cudaStreamPerThread);
  void* other_thread_got = nullptr;
  std::thread([&] { other_thread_got = cache.allocate_async(2048, cudaStreamPerThread); }).join();
  EXPECT_NE(other_thread_got, freed_by_main) << "cudaStreamPerThread is another stream in another thread";
  EXPECT_EQ(cache.allocate_async(2048, cudaStreamPerThread), freed_by_main);
  cache.deallocate_async(other_thread_got, 2048, cudaStreamPerThread);
  cache.deallocate_async(freed_by_main, 2048, cudaStreamPerThread);
}

TEST(CachingResource, ANewThreadNeverGetsTheBlocksOfAnEndedThreadsPerThreadStream) {
  // An ended thread's per-thread default stream may still run its work; a new
  // thread (which glibc often gives the same std::thread::id) has a stream of its own.
  host_memory_resource upstream;
  fake_ordering ordering;
  caching_resource cache(upstream, {}, ordering);
  for (int attempt = 0; attempt < 50; ++attempt) {
    void* ended_threads_block = nullptr;
    std::thread::id ended_id;
    std::thread([&] {
      ended_id = std::this_thread::get_id();
      settle(cache, cudaStreamPerThread, 2048);
      ended_threads_block = cache.allocate_async(2048, cudaStreamPerThread);
      cache.deallocate_async(ended_threads_block, 2048, cudaStreamPerThread);  // kept for its stream alone
    }).join();
    void* new_threads_block = nullptr;
    std::thread::id new_id;
    std::thread([&] {
      new_id = std::this_thread::get_id();
      new_threads_block = cache.allocate_async(2048, cudaStreamPerThread);
      cache.deallocate_async(new_threads_block, 2048, cudaStreamPerThread);
    }).join();
    if (new_id != ended_id) continue;
    EXPECT_NE(new_threads_block, ended_threads_block) << "the new thread took the ended thread's block unordered";
    cache.release();
    return;
  }
  GTEST_SKIP() << "no thread id came back in 50 threads here: nothing to check";
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
  // Every request was a hit or a miss, counted once, whichever path served it.
  const cache_statistics counts = cache.statistics();
  EXPECT_EQ(counts.hits + counts.misses, 16u * 3000u);
  EXPECT_GT(counts.hits, counts.misses);
  cache.release();
  EXPECT_EQ(upstream.used_bytes(), 0u);
}

// ---- on the GPU ----------------------------------------------------------------

TEST(CachingResourceOnGpu, AFreeOnOneStreamReachesAnotherOnlyAfterItsKernels) {
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
  // Reused (the new stream's first free sealed it) and ordered after the kernels
  // on `first`: were it not, their late writes would show as mismatches.
  auto* other = static_cast<std::uint32_t*>(cache.allocate_async(count * 4, second));
  EXPECT_EQ(other, words);
  write_sequence(other, count, 500, second);
  EXPECT_EQ(count_sequence_mismatches(other, count, 500, second), 0u);
  cache.deallocate_async(other, count * 4, second);
  EXPECT_EQ(cache.statistics().cross_stream_reuses, 1u);
}

/// A burst of 16 MiB blocks to 60 % of what the device has free, all freed,
/// then one request for 90 % of it through `top`.
void expect_ninety_percent_after_a_freed_burst(stream_ordered_resource& top) {
  const cudapmr::stream stream(0);
  const std::size_t free_at_start = device(0).free_memory();
  constexpr std::size_t block = 16 * mebibyte;
  std::vector<void*> burst;
  for (std::size_t held = 0; held < free_at_start / 10 * 6; held += block)
    burst.push_back(top.allocate_async(block, stream));
  for (void* p : burst) top.deallocate_async(p, block, stream);
  stream.synchronize();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const std::size_t request = free_at_start / 10 * 9;
  void* whole = nullptr;
  EXPECT_NO_THROW(whole = top.allocate_async(request, stream)) << top.description();
  top.deallocate_async(whole, request, stream);
  top.trim(stream);
}

TEST(CachingResourceOnGpu, NinetyPercentOfTheDeviceAfterAFreedBurstOverAPool) {
  CUDAPMR_REQUIRE_GPU();
  if (under_compute_sanitizer()) GTEST_SKIP() << "filling the device under compute-sanitizer takes too long";
  device_memory_resource device_memory(0, device_pool_options{});
  caching_resource cache(device_memory);
  expect_ninety_percent_after_a_freed_burst(cache);
}

TEST(CachingResourceOnGpu, NinetyPercentOfTheDeviceAfterAFreedBurstOverCudaMalloc) {
  CUDAPMR_REQUIRE_GPU();
  if (under_compute_sanitizer()) GTEST_SKIP() << "filling the device under compute-sanitizer takes too long";
  device_malloc_resource device_memory(0);
  caching_resource cache(device_memory);
  expect_ninety_percent_after_a_freed_burst(cache);
}

TEST(CachingResourceOnGpu, TheSameStreamReusesAtOnceInOrder) {
  CUDAPMR_REQUIRE_GPU();
  device_memory_resource device_memory(0, device_pool_options{});
  caching_resource cache(device_memory);
  const cudapmr::stream first(0);
  constexpr std::size_t count = 16 << 20;
  auto* words = static_cast<std::uint32_t*>(cache.allocate_async(count * 4, first));
  write_sequence(words, count, 1, first);
  add_to_each(words, count, 1, first);
  cache.deallocate_async(words, count * 4, first);
  auto* again = static_cast<std::uint32_t*>(cache.allocate_async(count * 4, first));
  EXPECT_EQ(again, words);
  EXPECT_EQ(count_sequence_mismatches(again, count, 2, first), 0u);
  cache.deallocate_async(again, count * 4, first);
}

TEST(CachingResourceOnGpu, ProducerConsumerStreamsStayWithinTwoPoolGrowths) {
  CUDAPMR_REQUIRE_GPU();
  device_memory_resource device_memory(0, device_pool_options{});
  caching_resource cache(device_memory);
  const cudapmr::stream producer(0);
  const cudapmr::stream consumer(0);
  cudaEvent_t produced = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming), cudaSuccess);
  constexpr std::size_t count = mebibyte / 4;
  // Fewer rounds under compute-sanitizer: on the H200, racecheck (CUDA 13.0)
  // ended the process without a report during 2,000 rounds.
  const std::uint32_t rounds = under_compute_sanitizer() ? 50 : 2000;
  for (std::uint32_t i = 0; i < rounds; ++i) {
    auto* words = static_cast<std::uint32_t*>(cache.allocate_async(mebibyte, producer));
    write_sequence(words, count, i, producer);
    ASSERT_EQ(cudaEventRecord(produced, producer.get()), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(consumer.get(), produced, 0), cudaSuccess);
    add_to_each(words, count, 1, consumer);
    cache.deallocate_async(words, mebibyte, consumer);
  }
  consumer.synchronize();
  ASSERT_EQ(cudaEventDestroy(produced), cudaSuccess);
  // A CUDA pool grows in chunks of 32 MiB: the cache must not take more than two.
  EXPECT_LE(device_memory.stats().reserved_high, std::size_t{64} << 20);
  EXPECT_LE(cache.statistics().misses, 4u);
}

TEST(CachingResourceOnGpu, AGraphCapturedOverTheCacheGetsItsOwnMemory) {
  CUDAPMR_REQUIRE_GPU();
  device_memory_resource device_memory(0, device_pool_options{});
  caching_resource cache(device_memory);
  const cudapmr::stream stream(0);
  constexpr std::size_t count = mebibyte / 4;
  void* cached = cache.allocate_async(mebibyte, stream);
  cache.deallocate_async(cached, mebibyte, stream);
  stream.synchronize();
  ASSERT_EQ(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeRelaxed), cudaSuccess);
  auto* in_graph = static_cast<std::uint32_t*>(cache.allocate_async(mebibyte, stream));
  write_sequence(in_graph, count, 7, stream);
  cache.deallocate_async(in_graph, mebibyte, stream);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream.get(), &graph), cudaSuccess);
  EXPECT_NE(static_cast<void*>(in_graph), cached);
  const graph_memory_nodes memory_nodes = count_memory_nodes(graph);
  EXPECT_EQ(memory_nodes.allocations, 1);
  EXPECT_EQ(memory_nodes.frees, 1);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream.get()), cudaSuccess);
  stream.synchronize();
  EXPECT_EQ(cache.statistics().cached_blocks, 1u);
  EXPECT_EQ(cache.allocate_async(mebibyte, stream), cached);
  cache.deallocate_async(cached, mebibyte, stream);
  ASSERT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  ASSERT_EQ(cudaGraphDestroy(graph), cudaSuccess);
}

TEST(CachingResourceOnGpu, ReleaseDuringAnotherThreadsGlobalCaptureKeepsTheBlocksAndSaysWhy) {
  // release() must wait for every device for blocks freed on other streams,
  // and CUDA refuses a device-wide wait while any stream of the device is
  // captured, relaxed capture mode or not (seen on the H100): the blocks stay
  // cached, nothing is handed back unordered, and the error names the cause.
  CUDAPMR_REQUIRE_GPU();
  device_memory_resource device_memory(0, device_pool_options{});
  caching_resource cache(device_memory);
  const cudapmr::stream freeing(0);
  const cudapmr::stream capturing(0);
  settle(cache, freeing, mebibyte);
  cache.deallocate_async(cache.allocate_async(mebibyte, freeing), mebibyte, freeing);  // unsealed: release waits
  const std::size_t cached = cache.statistics().cached_blocks;
  load_test_kernels();
  auto* words = static_cast<std::uint32_t*>(device_memory.allocate_async(mebibyte, capturing));
  capturing.synchronize();
  ASSERT_EQ(cudaStreamBeginCapture(capturing.get(), cudaStreamCaptureModeGlobal), cudaSuccess);
  write_sequence(words, mebibyte / 4, 3, capturing);
  bool refused = false;
  std::thread([&] {
    try {
      cache.release();
    } catch (const cuda_error& error) {
      refused = true;
      EXPECT_NE(std::string(error.what()).find("capturing"), std::string::npos) << error.what();
    }
  }).join();
  cudaGraph_t graph = nullptr;
  static_cast<void>(cudaStreamEndCapture(capturing.get(), &graph));
  if (graph != nullptr) {
    EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  }
  static_cast<void>(cudaGetLastError());  // an invalidated capture is reported to its thread, not sticky
  if (refused) {
    EXPECT_GE(cache.statistics().cached_blocks, cached) << "blocks were handed back without the wait";
  }
  cache.release();  // no capture now: everything goes back
  EXPECT_EQ(cache.statistics().cached_blocks, 0u);
  device_memory.deallocate_async(words, mebibyte, capturing);
}

TEST(CachingResourceOnGpu, AStreamPerRequestKeepsTheBookkeepingBounded) {
  // A server that makes a stream per request: CUDA gives a destroyed stream's
  // handle to a later one, so the caches' per-stream entries stay few.
  CUDAPMR_REQUIRE_GPU();
  device_memory_resource device_memory(0, device_pool_options{});
  caching_resource cache(device_memory);
  coalescing_resource arena(device_memory);
  for (int request = 0; request < 2000; ++request) {
    const cudapmr::stream per_request(0);
    cache.deallocate_async(cache.allocate_async(4096, per_request), 4096, per_request);
    arena.deallocate_async(arena.allocate_async(4096, per_request), 4096, per_request);
  }
  EXPECT_LE(cache.statistics().streams, 64u);
  EXPECT_LE(arena.statistics().streams, 64u);
  cache.release();
  arena.release();
}

TEST(CachingResourceOnGpu, PmrDeallocateIsAFreeInOrderOnTheBoundStream) {
  // README's contract: work still queued on the bound stream may use memory
  // given to pmr deallocate; the block must not come back before it is done.
  CUDAPMR_REQUIRE_GPU();
  pinned_memory_resource pinned;
  caching_resource cache(pinned);
  for (stream_ordered_resource* resource : {static_cast<stream_ordered_resource*>(&pinned),
                                            static_cast<stream_ordered_resource*>(&cache)}) {
    constexpr std::size_t count = 64 << 20;  // 256 MiB of pinned memory: the kernels take a while
    auto* words = static_cast<std::uint32_t*>(resource->allocate(count * 4));
    const stream_ref bound = resource->bound_stream();
    write_sequence(words, count, 1, bound);
    add_to_each(words, count, 1, bound);
    resource->deallocate(words, count * 4);
    auto* again = static_cast<std::uint32_t*>(resource->allocate(count * 4));
    if (again == words) {
      EXPECT_EQ(cudaStreamQuery(bound.get()), cudaSuccess) << resource->description();
    }
    for (std::size_t i = 0; i < count; i += 4099) again[i] = 0;  // the host, at once: no kernel may still write
    mark_initialized(again, count * 4, bound);
    resource->deallocate(again, count * 4);
  }
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

// The shared contract, over the host resource and each kind's owned pool.
using caching_resource_cases = adaptor_over_each_kind<caching_maker>;
using caching_resource_exhaustible_cases = adaptor_over_exhaustible_kinds<caching_maker>;
CUDAPMR_INSTANTIATE_RESOURCE_CONTRACT(CachingResource, caching_resource_cases, caching_resource_exhaustible_cases);
// And over the frugal leaf, cudaMalloc.
using caching_over_malloc_cases = ::testing::Types<adaptor_case<device_malloc_case, caching_maker>>;
CUDAPMR_INSTANTIATE_RESOURCE_CONTRACT(CachingOverMalloc, caching_over_malloc_cases, caching_over_malloc_cases);

}  // namespace
}  // namespace cudapmr::test
