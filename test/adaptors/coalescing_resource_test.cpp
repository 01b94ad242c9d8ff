// SPDX-License-Identifier: Apache-2.0
// coalescing_resource: best fit, split and merge within segments, reuse across
// sizes, frees on other streams only after their events, capture, release and
// exhaustion. Host tests over the host resource with made-up stream handles;
// GPU tests of the real events, waits and graphs; the shared contract.
#include "support/fake_ordering.hpp"
#include "support/resource_contract.hpp"
#include "support/resource_cases.hpp"

#include <cudapmr/adaptors/coalescing_resource.hpp>
#include <cudapmr/adaptors/failure_callback_adaptor.hpp>
#include <cudapmr/adaptors/limiting_adaptor.hpp>
#include <cudapmr/adaptors/resource_adaptor.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace cudapmr::test {
namespace {

TEST(CoalescingResource, ABlockFreedOnItsStreamServesASmallerRequestFromTheSameSegment) {
  host_memory_resource upstream;
  coalescing_resource arena(upstream);
  auto* big = static_cast<std::byte*>(arena.allocate_async(16 * mebibyte, fake_stream(1)));
  arena.deallocate_async(big, 16 * mebibyte, fake_stream(1));
  // Two 6 MiB tensors fit where the 16 MiB one was: no new segment.
  auto* first = static_cast<std::byte*>(arena.allocate_async(6 * mebibyte, fake_stream(1)));
  auto* second = static_cast<std::byte*>(arena.allocate_async(6 * mebibyte, fake_stream(1)));
  EXPECT_EQ(first, big);
  EXPECT_EQ(second, big + 6 * mebibyte);
  const coalescing_statistics stats = arena.statistics();
  EXPECT_EQ(stats.segment_allocations, 1u);
  EXPECT_EQ(stats.reserved_bytes, 16 * mebibyte);
  EXPECT_EQ(stats.used_bytes, 12 * mebibyte);
  EXPECT_EQ(upstream.used_bytes(), 16 * mebibyte);
  arena.deallocate_async(first, 6 * mebibyte, fake_stream(1));
  arena.deallocate_async(second, 6 * mebibyte, fake_stream(1));
  // Merged again: the whole segment serves its first size.
  EXPECT_EQ(arena.allocate_async(16 * mebibyte, fake_stream(1)), big);
  arena.deallocate_async(big, 16 * mebibyte, fake_stream(1));
}

TEST(CoalescingResource, FreedNeighboursMergeWhicheverIsFreedFirst) {
  host_memory_resource upstream;
  coalescing_resource arena(upstream);
  constexpr std::size_t piece = 4 * mebibyte;
  auto* whole = static_cast<std::byte*>(arena.allocate_async(3 * piece, fake_stream(1)));
  arena.deallocate_async(whole, 3 * piece, fake_stream(1));
  void* a = arena.allocate_async(piece, fake_stream(1));
  void* b = arena.allocate_async(piece, fake_stream(1));
  void* c = arena.allocate_async(piece, fake_stream(1));
  EXPECT_EQ(arena.statistics().segment_allocations, 1u);
  // The middle last: it joins a free block on each side.
  arena.deallocate_async(a, piece, fake_stream(1));
  arena.deallocate_async(c, piece, fake_stream(1));
  arena.deallocate_async(b, piece, fake_stream(1));
  EXPECT_EQ(arena.allocate_async(3 * piece, fake_stream(1)), whole);
  EXPECT_EQ(arena.statistics().segment_allocations, 1u);
  arena.deallocate_async(whole, 3 * piece, fake_stream(1));
}

TEST(CoalescingResource, TakesTheSmallestFreeBlockThatFits) {
  host_memory_resource upstream;
  coalescing_resource arena(upstream);
  void* large = arena.allocate_async(32 * mebibyte, fake_stream(1));
  void* medium = arena.allocate_async(8 * mebibyte, fake_stream(1));
  arena.deallocate_async(large, 32 * mebibyte, fake_stream(1));
  arena.deallocate_async(medium, 8 * mebibyte, fake_stream(1));
  EXPECT_EQ(arena.allocate_async(6 * mebibyte, fake_stream(1)), medium);
  EXPECT_EQ(arena.statistics().segment_allocations, 2u);
  arena.deallocate_async(medium, 6 * mebibyte, fake_stream(1));
}

TEST(CoalescingResource, SmallRequestsShareASmallSegmentAndRoundTo512) {
  host_memory_resource upstream;
  coalescing_resource arena(upstream);
  auto* first = static_cast<std::byte*>(arena.allocate_async(1, fake_stream(1)));
  auto* second = static_cast<std::byte*>(arena.allocate_async(700, fake_stream(1)));
  auto* third = static_cast<std::byte*>(arena.allocate_async(512 * 1024, fake_stream(1)));
  EXPECT_EQ(second, first + 512);
  EXPECT_EQ(third, first + 1536);
  const coalescing_statistics stats = arena.statistics();
  EXPECT_EQ(stats.segments, 1u);
  EXPECT_EQ(stats.reserved_bytes, 2 * mebibyte);
  EXPECT_EQ(stats.used_bytes, 512 + 1024 + 512 * 1024);
  // A large request never takes a small segment's room.
  void* large = arena.allocate_async(mebibyte + 1, fake_stream(1));
  EXPECT_EQ(arena.statistics().segments, 2u);
  for (auto [p, bytes] : {std::pair<void*, std::size_t>{first, 1}, {second, 700}, {third, 512 * 1024},
                          {large, mebibyte + 1}})
    arena.deallocate_async(p, bytes, fake_stream(1));
}

TEST(CoalescingResource, AGrowingWorkingSetLeavesNoTrailOfOutgrownSegments) {
  host_memory_resource upstream;
  coalescing_resource arena(upstream);
  for (std::size_t bytes = 4 * mebibyte; bytes <= 32 * mebibyte; bytes *= 2)
    arena.deallocate_async(arena.allocate_async(bytes, fake_stream(1)), bytes, fake_stream(1));
  const coalescing_statistics stats = arena.statistics();
  EXPECT_EQ(stats.reserved_bytes, 32 * mebibyte);
  EXPECT_EQ(stats.reserved_peak, 32 * mebibyte);
  EXPECT_EQ(stats.segment_frees, 3u);
  // A size it held before comes from the segment it keeps, split.
  void* again = arena.allocate_async(8 * mebibyte, fake_stream(1));
  EXPECT_EQ(arena.statistics().segment_allocations, 4u);
  arena.deallocate_async(again, 8 * mebibyte, fake_stream(1));
}

TEST(CoalescingResource, AStreamNeverGetsABlockOfAnotherStreamsSegmentInUse) {
  host_memory_resource upstream;
  fake_ordering ordering;
  coalescing_resource arena(upstream, {}, ordering);
  auto* segment = static_cast<std::byte*>(arena.allocate_async(16 * mebibyte, fake_stream(1)));
  arena.deallocate_async(segment, 16 * mebibyte, fake_stream(1));
  void* held = arena.allocate_async(4 * mebibyte, fake_stream(1));  // the segment is in use again
  auto* other = static_cast<std::byte*>(arena.allocate_async(8 * mebibyte, fake_stream(2)));
  EXPECT_TRUE(other < segment || other >= segment + 16 * mebibyte) << "stream 2 got memory of stream 1's segment";
  EXPECT_EQ(arena.statistics().segments_adopted, 0u);
  EXPECT_TRUE(ordering.waits.empty());
  arena.deallocate_async(held, 4 * mebibyte, fake_stream(1));
  arena.deallocate_async(other, 8 * mebibyte, fake_stream(2));
}

TEST(CoalescingResource, AStreamDoesNotTakeOverASegmentMoreThanTwiceItsRequest) {
  host_memory_resource upstream;
  fake_ordering ordering;
  coalescing_resource arena(upstream, {}, ordering);
  void* huge = arena.allocate_async(64 * mebibyte, fake_stream(1));
  arena.deallocate_async(huge, 64 * mebibyte, fake_stream(1));
  // Stream 1 will want its 64 MiB again: a 4 MiB tensor on stream 2 must not split it.
  void* small = arena.allocate_async(4 * mebibyte, fake_stream(2));
  EXPECT_EQ(arena.statistics().segments_adopted, 0u);
  EXPECT_EQ(arena.allocate_async(64 * mebibyte, fake_stream(1)), huge);
  arena.deallocate_async(huge, 64 * mebibyte, fake_stream(1));
  arena.deallocate_async(small, 4 * mebibyte, fake_stream(2));
}

TEST(CoalescingResource, UnderPressureABlockAnotherStreamFreedIsFoundAfterTheSynchronize) {
  host_memory_resource upstream(12 * mebibyte);
  fake_ordering ordering;
  coalescing_resource arena(upstream, {}, ordering);
  auto* whole = static_cast<std::byte*>(arena.allocate_async(10 * mebibyte, fake_stream(1)));
  arena.deallocate_async(whole, 10 * mebibyte, fake_stream(1));
  void* kept = arena.allocate_async(2 * mebibyte, fake_stream(1));
  void* consumed = arena.allocate_async(8 * mebibyte, fake_stream(1));
  arena.deallocate_async(consumed, 8 * mebibyte, fake_stream(2));  // pending on stream 2's event
  // No room upstream for another 8 MiB: once every device is idle, the consumed block serves.
  EXPECT_EQ(arena.allocate_async(8 * mebibyte, fake_stream(1)), consumed);
  EXPECT_EQ(ordering.device_synchronizations, 1);
  EXPECT_EQ(upstream.used_bytes(), 10 * mebibyte);
  arena.deallocate_async(consumed, 8 * mebibyte, fake_stream(1));
  arena.deallocate_async(kept, 2 * mebibyte, fake_stream(1));
}

TEST(CoalescingResource, ASecondFreeOrAForeignPointerIsIgnored) {
  host_memory_resource upstream;
  coalescing_resource arena(upstream);
  auto* base = static_cast<std::byte*>(arena.allocate_async(4 * mebibyte, fake_stream(1)));
  void* neighbour = arena.allocate_async(4 * mebibyte, fake_stream(1));
  arena.deallocate_async(base, 4 * mebibyte, fake_stream(1));
  arena.deallocate_async(base, 4 * mebibyte, fake_stream(1));  // twice: the segment must stay
  int foreign = 0;
  arena.deallocate_async(&foreign, 64, fake_stream(1));
  EXPECT_EQ(arena.statistics().segments, 2u);
  EXPECT_EQ(upstream.used_bytes(), 8 * mebibyte);
  EXPECT_EQ(arena.allocate_async(4 * mebibyte, fake_stream(1)), base);
  arena.deallocate_async(base, 4 * mebibyte, fake_stream(1));
  arena.deallocate_async(neighbour, 4 * mebibyte, fake_stream(1));
}

TEST(CoalescingResource, AStreamTakesOverAnotherStreamsIdleSegmentAfterWaitingForIt) {
  host_memory_resource upstream;
  fake_ordering ordering;
  coalescing_resource arena(upstream, {}, ordering);
  // A new stream per request: each takes over the last one's memory.
  void* first = arena.allocate_async(8 * mebibyte, fake_stream(1));
  arena.deallocate_async(first, 8 * mebibyte, fake_stream(1));
  ASSERT_EQ(ordering.events.size(), 1u) << "a free that leaves a segment wholly free records an event";
  void* second = arena.allocate_async(6 * mebibyte, fake_stream(2));
  EXPECT_EQ(second, first);
  ASSERT_EQ(ordering.waits.size(), 1u);
  EXPECT_EQ(ordering.waits[0], std::make_pair(fake_stream(2), fake_stream(1)));
  arena.deallocate_async(second, 6 * mebibyte, fake_stream(2));
  ordering.complete_all();
  EXPECT_EQ(arena.allocate_async(8 * mebibyte, fake_stream(3)), first);
  EXPECT_EQ(ordering.waits.size(), 1u) << "a completed event needs no wait";
  const coalescing_statistics stats = arena.statistics();
  EXPECT_EQ(stats.segment_allocations, 1u);
  EXPECT_EQ(stats.segments_adopted, 2u);
  EXPECT_EQ(upstream.used_bytes(), 8 * mebibyte);
  arena.deallocate_async(first, 8 * mebibyte, fake_stream(3));
}

TEST(CoalescingResource, ABlockFreedOnAnotherStreamWaitsForTheEventRecordedThere) {
  host_memory_resource upstream;
  fake_ordering ordering;
  coalescing_resource arena(upstream, {}, ordering);
  void* produced = arena.allocate_async(4 * mebibyte, fake_stream(1));
  arena.deallocate_async(produced, 4 * mebibyte, fake_stream(2));  // the consumer frees it
  ASSERT_EQ(ordering.events.size(), 1u);
  EXPECT_EQ(ordering.events[0]->stream, fake_stream(2));
  EXPECT_EQ(arena.statistics().pending_blocks, 1u);
  // The consumer's work may still run: the producer's next block is elsewhere.
  void* next = arena.allocate_async(4 * mebibyte, fake_stream(1));
  EXPECT_NE(next, produced);
  arena.deallocate_async(next, 4 * mebibyte, fake_stream(1));
  ordering.complete_all();
  EXPECT_EQ(arena.allocate_async(4 * mebibyte, fake_stream(1)), produced);
  EXPECT_EQ(arena.statistics().pending_blocks, 0u);
  EXPECT_EQ(ordering.recycled, 1u);
  arena.deallocate_async(produced, 4 * mebibyte, fake_stream(1));
}

TEST(CoalescingResource, PendingFreesOfOneStreamAreLookedAtOnlyUpToTheFirstIncompleteEvent) {
  host_memory_resource upstream;
  fake_ordering ordering;
  coalescing_resource arena(upstream, {}, ordering);
  std::vector<void*> consumed;
  for (int i = 0; i < 50; ++i) consumed.push_back(arena.allocate_async(mebibyte, fake_stream(1)));
  for (void* p : consumed) arena.deallocate_async(p, mebibyte, fake_stream(2));  // 50 events, in order on stream 2
  void* other = arena.allocate_async(mebibyte, fake_stream(3));
  arena.deallocate_async(other, mebibyte, fake_stream(4));
  ASSERT_EQ(arena.statistics().pending_blocks, 51u);
  // Events of one stream complete in order: past its first incomplete one, none is asked about.
  ordering.queries = 0;
  arena.deallocate_async(arena.allocate_async(mebibyte, fake_stream(1)), mebibyte, fake_stream(1));
  EXPECT_EQ(ordering.queries, 2u) << "one query for each stream with pending frees";
  // Once complete, every block comes back, the order of the rest kept.
  ordering.events[0]->completed = true;
  ordering.events[1]->completed = true;
  arena.deallocate_async(arena.allocate_async(mebibyte, fake_stream(1)), mebibyte, fake_stream(1));
  EXPECT_EQ(arena.statistics().pending_blocks, 49u);
  ordering.complete_all();
  arena.deallocate_async(arena.allocate_async(mebibyte, fake_stream(1)), mebibyte, fake_stream(1));
  EXPECT_EQ(arena.statistics().pending_blocks, 0u);
}

TEST(CoalescingResource, ABlockFreedDuringCaptureIsRetiredUntilTheResourceGoes) {
  host_memory_resource upstream;
  fake_ordering ordering;
  {
    coalescing_resource arena(upstream, {}, ordering);
    void* before = arena.allocate_async(4 * mebibyte, fake_stream(1));
    ordering.captured.insert(fake_stream(1));
    const std::size_t used = upstream.used_bytes();
    void* in_graph = arena.allocate_async(mebibyte, fake_stream(1));
    EXPECT_EQ(upstream.used_bytes(), used + mebibyte) << "a graph's allocation came from a segment";
    arena.deallocate_async(in_graph, mebibyte, fake_stream(1));
    EXPECT_EQ(upstream.used_bytes(), used);
    arena.deallocate_async(before, 4 * mebibyte, fake_stream(1));  // the graph may use it at every launch
    ordering.captured.clear();
    EXPECT_EQ(arena.statistics().retired_blocks, 1u);
    void* after = arena.allocate_async(4 * mebibyte, fake_stream(1));
    EXPECT_NE(after, before) << "a block freed during capture was reused";
    arena.deallocate_async(after, 4 * mebibyte, fake_stream(1));
    arena.release();
    EXPECT_EQ(upstream.used_bytes(), 4 * mebibyte) << "release() returned a block a graph may still use";
  }
  // Destroyed: after a synchronize, the retired block's segment goes back too.
  EXPECT_EQ(upstream.used_bytes(), 0u);
  EXPECT_GE(ordering.device_synchronizations, 1);
}

TEST(CoalescingResource, AFailedSynchronizeAtDestructionStillReturnsTheIdleSegments) {
  host_memory_resource upstream;
  fake_ordering ordering;
  void* retired = nullptr;
  {
    coalescing_resource arena(upstream, {}, ordering);
    retired = arena.allocate_async(4 * mebibyte, fake_stream(1));
    ordering.captured.insert(fake_stream(1));
    arena.deallocate_async(retired, 4 * mebibyte, fake_stream(1));  // retired: waits for a synchronize
    ordering.captured.clear();
    arena.deallocate(arena.allocate(mebibyte), mebibyte);  // a wholly free segment of the bound stream
    EXPECT_EQ(upstream.used_bytes(), 6 * mebibyte);
    ordering.synchronize_fails = true;
  }
  // The retired block's segment stays with the upstream; the idle one, which
  // needs no synchronize, does not.
  EXPECT_EQ(upstream.used_bytes(), 4 * mebibyte);
  EXPECT_EQ(ordering.device_synchronizations, 1);
  upstream.deallocate_async(retired, 4 * mebibyte, 256, fake_stream(1));  // the segment, its block at its base
  EXPECT_EQ(upstream.used_bytes(), 0u);
}

TEST(CoalescingResource, ExhaustionGivesBackFreeSegmentsOfEveryStreamAndRetries) {
  host_memory_resource upstream(8 * mebibyte);
  fake_ordering ordering;
  coalescing_resource arena(upstream, {}, ordering);
  void* one = arena.allocate_async(4 * mebibyte, fake_stream(1));
  void* two = arena.allocate_async(2 * mebibyte, fake_stream(2));
  arena.deallocate_async(one, 4 * mebibyte, fake_stream(1));
  arena.deallocate_async(two, 2 * mebibyte, fake_stream(2));
  // 6 MiB on stream 3 fit only once both free segments are gone.
  void* p = arena.allocate_async(6 * mebibyte, fake_stream(3));
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(ordering.device_synchronizations, 1) << "other streams' segments left without a synchronize";
  const coalescing_statistics stats = arena.statistics();
  EXPECT_EQ(stats.segments, 1u);
  EXPECT_EQ(stats.segment_frees, 2u);
  arena.deallocate_async(p, 6 * mebibyte, fake_stream(3));
  try {
    static_cast<void>(arena.allocate_async(9 * mebibyte + 5, fake_stream(3)));
    ADD_FAILURE() << "9 MiB granted by an 8 MiB upstream";
  } catch (const out_of_memory& error) {
    EXPECT_EQ(error.requested_bytes(), 9 * mebibyte + 5);
    EXPECT_NE(std::string(error.what()).find("coalescing_resource"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find(std::to_string(10 * mebibyte)), std::string::npos) << error.what();
  }
  // The free segment went back on the way, and the resource still serves.
  EXPECT_EQ(upstream.used_bytes(), 0u);
  void* again = arena.allocate_async(6 * mebibyte, fake_stream(3));
  EXPECT_EQ(upstream.used_bytes(), 6 * mebibyte);
  arena.deallocate_async(again, 6 * mebibyte, fake_stream(3));
}

TEST(CoalescingResource, ExhaustionWaitsForABlockAnotherStreamFreedRatherThanFail) {
  host_memory_resource upstream(8 * mebibyte);
  fake_ordering ordering;
  coalescing_resource arena(upstream, {}, ordering);
  void* first = arena.allocate_async(6 * mebibyte, fake_stream(3));
  arena.deallocate_async(first, 6 * mebibyte, fake_stream(4));  // pending until stream 4 gets there
  // No room upstream, nothing free in order: after the wait for the device
  // the freed memory serves (its segment, or the room it leaves upstream).
  void* again = arena.allocate_async(6 * mebibyte, fake_stream(3));
  EXPECT_NE(again, nullptr);
  EXPECT_EQ(ordering.device_synchronizations, 1);
  EXPECT_EQ(upstream.used_bytes(), 6 * mebibyte) << "no second segment";
  arena.deallocate_async(again, 6 * mebibyte, fake_stream(3));
}

TEST(CoalescingResource, ACallbackBelowThatFreesThroughTheResourceDoesNotDeadlock) {
  // A spill on allocation failure frees through the resource that is asking
  // its upstream: no upstream call may hold the lock that free needs.
  host_memory_resource host;
  limiting_adaptor cap(host, 8 * mebibyte);
  void* spilled = nullptr;
  coalescing_resource* arena_below = nullptr;
  failure_callback_adaptor spilling(cap, [&](const allocation_failure& failure) {
    if (failure.attempt > 1 || spilled == nullptr) return false;
    arena_below->deallocate_async(std::exchange(spilled, nullptr), 6 * mebibyte, fake_stream(1));
    return true;
  });
  auto arena = std::make_shared<coalescing_resource>(spilling);
  arena_below = arena.get();
  spilled = arena->allocate_async(6 * mebibyte, fake_stream(1));
  auto done = std::make_shared<std::promise<void*>>();
  auto result = done->get_future();
  // On a thread of its own, so that a deadlock fails the test instead of hanging it.
  std::thread allocating([arena, done] { done->set_value(arena->allocate_async(4 * mebibyte, fake_stream(1))); });
  if (result.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    allocating.detach();  // stuck for good: it keeps the arena, never its upstreams again
    ADD_FAILURE() << "the allocation deadlocked in the failure callback's free";
    return;
  }
  allocating.join();
  void* p = result.get();
  EXPECT_EQ(spilled, nullptr);
  EXPECT_EQ(cap.used_bytes(), 4 * mebibyte) << "the spilled block's segment went back for the retry";
  arena->deallocate_async(p, 4 * mebibyte, fake_stream(1));
}

/// An upstream that runs `during_allocate` once, inside its next allocation:
/// another thread's call through the resource meanwhile.
class hooked_upstream final : public resource_adaptor {
 public:
  explicit hooked_upstream(stream_ordered_resource& upstream) : resource_adaptor(upstream) {}
  std::function<void()> during_allocate;
  [[nodiscard]] std::string description() const override { return "hooked_upstream"; }

 private:
  void* do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) override {
    if (during_allocate) std::exchange(during_allocate, {})();
    return upstream_resource().allocate_async(bytes, alignment, stream);
  }
  void do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept override {
    upstream_resource().deallocate_async(p, bytes, alignment, stream);
  }
};

/// A new segment left unused: while the arena makes a segment for a 3 MiB
/// request on a stream, a free of a 4 MiB block there leaves a better fit.
/// The new segment is still memory handed out in that stream's order (a leaf
/// below may have mapped pages whose work is queued there): given back on
/// another stream with nothing ordering it, it would be reused under that work.
class NewSegmentLeftUnused : public ::testing::Test {
 protected:
  /// The 3 MiB request on `stream`, `better_fit` (4 MiB, live) freed there while its segment is made.
  void* allocate_while_freeing(void* better_fit, cudaStream_t stream) {
    upstream.during_allocate = [=, this] { arena.deallocate_async(better_fit, 4 * mebibyte, stream); };
    return arena.allocate_async(3 * mebibyte, stream);
  }

  host_memory_resource host;
  hooked_upstream upstream{host};
  fake_ordering ordering;
  coalescing_resource arena{upstream, {}, ordering};
};

TEST_F(NewSegmentLeftUnused, GoesBackOnlyOnceItsStreamsOrderReachesIt) {
  void* first = arena.allocate_async(4 * mebibyte, fake_stream(1));
  void* second = allocate_while_freeing(first, fake_stream(1));
  ASSERT_EQ(second, first) << "the block freed meanwhile, the better fit, was not the one taken: the case shows nothing";
  const std::size_t reserved = arena.statistics().reserved_bytes;
  ASSERT_GT(reserved, 4 * mebibyte);
  EXPECT_EQ(arena.release_idle(0), 0u) << "the unused segment went back before stream 1's work reached it";
  ordering.complete_all();
  EXPECT_EQ(arena.release_idle(0), reserved - 4 * mebibyte);
  arena.deallocate_async(second, 3 * mebibyte, fake_stream(1));
}

TEST_F(NewSegmentLeftUnused, DuringAReleasesSynchronizeStaysForItsStream) {
  // The synchronize of release() covers only what was freed before it began.
  void* first = arena.allocate_async(4 * mebibyte, fake_stream(2));
  // Another stream's idle segment, too large for stream 2 to take over: release() synchronizes for it.
  void* elsewhere = arena.allocate_async(16 * mebibyte, fake_stream(3));
  arena.deallocate_async(elsewhere, 16 * mebibyte, fake_stream(3));
  void* second = nullptr;
  ordering.during_synchronize = [&] { second = allocate_while_freeing(first, fake_stream(2)); };
  arena.release();
  ASSERT_EQ(second, first) << "the block freed meanwhile, the better fit, was not the one taken: the case shows nothing";
  EXPECT_EQ(arena.statistics().reserved_bytes, 8 * mebibyte)
      << "the unused segment made during the synchronize went back with nothing ordering it after stream 2";
  arena.deallocate_async(second, 3 * mebibyte, fake_stream(2));
}

TEST(CoalescingResource, WithMaxIdleBytesWhatItHoldsFollowsWhatIsLive) {
  host_memory_resource upstream;
  coalescing_resource arena(upstream, coalescing_options{.max_idle_bytes = 4 * mebibyte});
  std::vector<void*> blocks;
  for (int i = 0; i < 3; ++i) blocks.push_back(arena.allocate_async(4 * mebibyte, fake_stream(1)));
  EXPECT_EQ(upstream.used_bytes(), 12 * mebibyte);
  for (void* p : blocks) arena.deallocate_async(p, 4 * mebibyte, fake_stream(1));
  EXPECT_EQ(upstream.used_bytes(), 4 * mebibyte) << "one idle segment kept, the others given back at their frees";
  EXPECT_EQ(arena.statistics().segment_frees, 2u);
  void* again = arena.allocate_async(4 * mebibyte, fake_stream(1));
  EXPECT_EQ(arena.statistics().segment_allocations, 3u) << "the kept segment serves the next request";
  arena.deallocate_async(again, 4 * mebibyte, fake_stream(1));
}

TEST(CoalescingResource, AtFreesItKeepsIdleSegmentsUpToHalfTheRecentPeak) {
  // A working set that dips and comes back finds its segments: half the most
  // in use lately stays idle, the rest goes back at the frees.
  host_memory_resource upstream;
  coalescing_resource arena(upstream, coalescing_options{.max_idle_bytes = mebibyte});
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(arena.allocate_async(4 * mebibyte, fake_stream(1)));
  for (void* p : blocks) arena.deallocate_async(p, 4 * mebibyte, fake_stream(1));
  EXPECT_EQ(upstream.used_bytes(), 16 * mebibyte) << "half of the 32 MiB peak kept idle";
  EXPECT_EQ(arena.statistics().segment_frees, 4u);
}

TEST(CoalescingResource, AFreeCountsOtherStreamsCompletedFreesAndGivesBackWhatPassesTheBound) {
  // The last frees of a program may all be frees on other streams: what they
  // leave idle goes back at the next free, not at an allocation that may never come.
  host_memory_resource upstream;
  fake_ordering ordering;
  coalescing_resource arena(upstream, coalescing_options{.max_idle_bytes = 4 * mebibyte}, ordering);
  void* small = arena.allocate_async(1024, fake_stream(1));
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(arena.allocate_async(4 * mebibyte, fake_stream(1)));
  for (void* p : blocks) arena.deallocate_async(p, 4 * mebibyte, fake_stream(2));
  EXPECT_EQ(upstream.used_bytes(), 34 * mebibyte) << "freed on another stream: pending until its events complete";
  ordering.complete_all();
  arena.deallocate_async(small, 1024, fake_stream(1));
  EXPECT_LE(upstream.used_bytes(), 16 * mebibyte) << "idle down to half the 32 MiB peak";
  EXPECT_EQ(arena.statistics().pending_blocks, 0u);
  EXPECT_EQ(ordering.synchronizations(), 0u);
}

TEST(CoalescingResource, ReleaseIdleGivesBackOnlyWhatNoQueuedWorkTouchesAndNeverWaits) {
  host_memory_resource upstream;
  fake_ordering ordering;
  coalescing_resource arena(upstream, coalescing_options{.max_idle_bytes = 8 * mebibyte}, ordering);
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(arena.allocate_async(8 * mebibyte, fake_stream(1)));
  for (void* p : blocks) arena.deallocate_async(p, 8 * mebibyte, fake_stream(1));
  ASSERT_EQ(upstream.used_bytes(), 16 * mebibyte) << "half the 32 MiB peak kept at the frees";
  EXPECT_EQ(arena.release_idle(), 0u) << "the frees' work is still queued";
  EXPECT_EQ(upstream.used_bytes(), 16 * mebibyte);
  ordering.complete_all();
  EXPECT_EQ(arena.release_idle(), 8 * mebibyte) << "idle down to max_idle_bytes: one 8 MiB segment stays";
  EXPECT_EQ(upstream.used_bytes(), 8 * mebibyte);
  EXPECT_EQ(ordering.synchronizations(), 0u);
  void* p = arena.allocate_async(8 * mebibyte, fake_stream(1));
  EXPECT_EQ(arena.statistics().segment_allocations, 4u) << "the kept segment served it";
  arena.deallocate_async(p, 8 * mebibyte, fake_stream(1));
  EXPECT_EQ(upstream.used_bytes(), 8 * mebibyte);
}

TEST(CoalescingResource, ReleaseIdleWithAKeepOfZeroGivesBackEveryIdleSegmentAndSaysWhatStillWaits) {
  host_memory_resource upstream;
  fake_ordering ordering;
  coalescing_resource arena(upstream, coalescing_options{.max_idle_bytes = 64 * mebibyte}, ordering);
  EXPECT_FALSE(arena.has_frees_waiting_on_work());
  void* own = arena.allocate_async(8 * mebibyte, fake_stream(1));
  void* other = arena.allocate_async(8 * mebibyte, fake_stream(1));
  arena.deallocate_async(own, 8 * mebibyte, fake_stream(1));
  arena.deallocate_async(other, 8 * mebibyte, fake_stream(2));
  EXPECT_TRUE(arena.has_frees_waiting_on_work()) << "both frees' work is still queued";
  EXPECT_EQ(arena.release_idle(0), 0u);
  ordering.complete_all();
  EXPECT_FALSE(arena.has_frees_waiting_on_work());
  const std::size_t held = upstream.used_bytes();
  ASSERT_GT(held, 0u) << "max_idle_bytes kept a segment at the frees";
  EXPECT_EQ(arena.release_idle(0), held) << "nothing kept, though max_idle_bytes would keep it all";
  EXPECT_EQ(upstream.used_bytes(), 0u);
  EXPECT_EQ(ordering.synchronizations(), 0u);
}

TEST(CoalescingResource, ReleaseKeepsSegmentsWithBlocksOutAndSynchronizesForOtherStreams) {
  host_memory_resource upstream;
  fake_ordering ordering;
  coalescing_resource arena(upstream, {}, ordering);
  void* kept = arena.allocate_async(4 * mebibyte, fake_stream(1));
  void* freed = arena.allocate_async(4 * mebibyte, fake_stream(2));
  arena.deallocate_async(freed, 4 * mebibyte, fake_stream(2));
  void* pending = arena.allocate_async(2 * mebibyte, fake_stream(3));
  arena.deallocate_async(pending, 2 * mebibyte, fake_stream(4));
  arena.release();
  EXPECT_EQ(ordering.device_synchronizations, 1);
  const coalescing_statistics stats = arena.statistics();
  EXPECT_EQ(stats.segments, 1u);
  EXPECT_EQ(stats.pending_blocks, 0u);
  EXPECT_EQ(upstream.used_bytes(), 4 * mebibyte);
  arena.deallocate_async(kept, 4 * mebibyte, fake_stream(1));
  arena.release();
  EXPECT_EQ(upstream.used_bytes(), 0u);
}

TEST(CoalescingResource, AFailedSynchronizeInReleaseStillReturnsTheBoundStreamsIdleSegments) {
  host_memory_resource upstream;
  fake_ordering ordering;
  {
    coalescing_resource arena(upstream, {}, ordering);
    arena.deallocate(arena.allocate(mebibyte), mebibyte);  // a wholly free segment of the bound stream
    void* consumed = arena.allocate_async(4 * mebibyte, fake_stream(1));
    arena.deallocate_async(consumed, 4 * mebibyte, fake_stream(2));  // pending: release() must synchronize
    EXPECT_EQ(upstream.used_bytes(), 6 * mebibyte);
    ordering.synchronize_fails = true;
    EXPECT_THROW(arena.release(), cuda_error);
    EXPECT_EQ(upstream.used_bytes(), 4 * mebibyte) << "the bound stream's idle segment needs no synchronize";
    EXPECT_EQ(arena.statistics().pending_blocks, 1u);
    ordering.synchronize_fails = false;
  }
  EXPECT_EQ(upstream.used_bytes(), 0u);
}

TEST(CoalescingResource, DestructionReturnsFreeSegments) {
  host_memory_resource upstream;
  {
    coalescing_resource arena(upstream);
    arena.deallocate_async(arena.allocate_async(3 * mebibyte, fake_stream(1)), 3 * mebibyte, fake_stream(1));
    arena.deallocate(arena.allocate(100), 100);
    EXPECT_GT(upstream.used_bytes(), 0u);
  }
  EXPECT_EQ(upstream.used_bytes(), 0u);
}

TEST(CoalescingResource, ZeroOverAlignedAndHugeRequestsGoStraightUpstream) {
  host_memory_resource upstream(64 * mebibyte);  // refuses 2^62 bytes before asking the system
  coalescing_resource arena(upstream);
  void* aligned = arena.allocate_async(1000, 4096, fake_stream(1));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(aligned) % 4096, 0u);
  EXPECT_EQ(arena.statistics().segments, 0u);
  EXPECT_EQ(upstream.used_bytes(), 1000u);
  arena.deallocate_async(aligned, 1000, 4096, fake_stream(1));
  EXPECT_EQ(upstream.used_bytes(), 0u);
  EXPECT_THROW(static_cast<void>(arena.allocate_async(std::size_t{1} << 62, fake_stream(1))), out_of_memory);
  void* nothing = arena.allocate_async(0, fake_stream(1));
  arena.deallocate_async(nothing, 0, fake_stream(1));
  EXPECT_EQ(arena.statistics().segments, 0u);
  EXPECT_EQ(upstream.used_bytes(), 0u);
}

TEST(CoalescingResource, RefusesBadOptionsByName) {
  host_memory_resource upstream;
  const auto refusal = [&](coalescing_options options) {
    try {
      coalescing_resource arena(upstream, options);
    } catch (const std::invalid_argument& error) {
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refusal({.small_request = 0}).find("small_request of 0 bytes"), std::string::npos);
  EXPECT_NE(refusal({.small_request = 4 * mebibyte}).find("small_segment of 2097152 bytes"), std::string::npos);
  EXPECT_NE(refusal({.segment_granularity = 3 * mebibyte}).find("segment_granularity of 3145728 bytes"),
            std::string::npos);
  EXPECT_NE(refusal({.shared_large_segment = std::size_t{1} << 50}).find("shared_large_segment of"), std::string::npos);
}

TEST(CoalescingResource, LargeRequestsShareSegmentsOnlyOnceMuchIsInUse) {
  host_memory_resource upstream;
  const coalescing_options options{.shared_large_segment = 8 * mebibyte};
  // A small working set: the segment is the request's size, rounded to 2 MiB.
  {
    coalescing_resource arena(upstream, options);
    void* alone = arena.allocate_async(3 * mebibyte, fake_stream(1));
    EXPECT_EQ(arena.statistics().reserved_bytes, 4 * mebibyte);
    arena.deallocate_async(alone, 3 * mebibyte, fake_stream(1));
  }
  // A large one: past 32 x 8 MiB in use, each new segment is 8 MiB and serves two 3 MiB requests.
  coalescing_resource arena(upstream, options);
  std::vector<void*> blocks;
  while (arena.statistics().used_bytes < 256 * mebibyte) blocks.push_back(arena.allocate_async(3 * mebibyte, fake_stream(1)));
  const coalescing_statistics grown = arena.statistics();
  for (int i = 0; i < 32; ++i) blocks.push_back(arena.allocate_async(3 * mebibyte, fake_stream(1)));
  const coalescing_statistics shared = arena.statistics();
  EXPECT_EQ(shared.segment_allocations - grown.segment_allocations, 16u) << "32 requests, two to a segment";
  EXPECT_EQ(shared.reserved_bytes - grown.reserved_bytes, 16 * 8 * mebibyte);
  for (void* p : blocks) arena.deallocate_async(p, 3 * mebibyte, fake_stream(1));
  arena.release();
  EXPECT_EQ(upstream.used_bytes(), 0u);
}

// ---- on the GPU: real events, waits and graphs ------------------------------------

TEST(CoalescingResourceOnGpu, ABlockFreedOnAnotherStreamReturnsOnlyAfterTheWorkBeforeTheFree) {
  CUDAPMR_REQUIRE_GPU();
  device_memory_resource device_memory(0, device_pool_options{});
  coalescing_resource arena(device_memory);
  const cudapmr::stream producer(0);
  const cudapmr::stream consumer(0);
  cudaEvent_t produced = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming), cudaSuccess);
  constexpr std::size_t count = 16 << 20;  // 64 MiB
  auto* words = static_cast<std::uint32_t*>(arena.allocate_async(count * 4, producer));
  // A second segment, free on its own stream: the allocation below needs no
  // upstream call (no CUDA call that might wait for the gated stream).
  void* spare = arena.allocate_async(count * 4, producer);
  arena.deallocate_async(spare, count * 4, producer);
  write_sequence(words, count, 1, producer);
  ASSERT_EQ(cudaEventRecord(produced, producer.get()), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(consumer.get(), produced, 0), cudaSuccess);
  stream_gate gate(consumer);
  add_to_each(words, count, 1, consumer);  // held back until the gate opens
  arena.deallocate_async(words, count * 4, consumer);
  EXPECT_EQ(arena.statistics().pending_blocks, 1u);
  // Were `words` free already, best fit would take it: its segment is the older.
  auto* next = static_cast<std::uint32_t*>(arena.allocate_async(count * 4, producer));
  if (next == words) {
    EXPECT_EQ(cudaStreamQuery(consumer.get()), cudaSuccess) << "the block came back before the consumer's kernel";
  }
  if (gate.holding()) {
    EXPECT_EQ(next, spare) << "the block came back before the consumer's kernel ran";
  }
  write_sequence(next, count, 500, producer);
  gate.open();
  consumer.synchronize();
  // Had the block come back, the consumer's late kernel would show as mismatches.
  EXPECT_EQ(count_sequence_mismatches(next, count, 500, producer), 0u);
  arena.deallocate_async(next, count * 4, producer);
  // Its event completed: the next allocation collects the block and takes it, the older segment's.
  void* again = arena.allocate_async(count * 4, producer);
  EXPECT_EQ(again, static_cast<void*>(words));
  EXPECT_EQ(arena.statistics().pending_blocks, 0u);
  arena.deallocate_async(again, count * 4, producer);
  producer.synchronize();
  ASSERT_EQ(cudaEventDestroy(produced), cudaSuccess);
}

TEST(CoalescingResourceOnGpu, AStreamTakesOverAnIdleSegmentOrderedAfterItsOwnersWork) {
  CUDAPMR_REQUIRE_GPU();
  device_memory_resource device_memory(0, device_pool_options{});
  coalescing_resource arena(device_memory);
  const cudapmr::stream first(0);
  const cudapmr::stream second(0);
  constexpr std::size_t count = 16 << 20;
  auto* words = static_cast<std::uint32_t*>(arena.allocate_async(count * 4, first));
  stream_gate gate(first);
  write_sequence(words, count, 1, first);  // held back until the gate opens
  add_to_each(words, count, 1, first);
  arena.deallocate_async(words, count * 4, first);  // its segment wholly free, an event recorded on `first`
  auto* taken = static_cast<std::uint32_t*>(arena.allocate_async(count * 4, second));
  EXPECT_EQ(taken, words) << "a new segment instead of the idle one";
  const coalescing_statistics stats = arena.statistics();
  EXPECT_EQ(stats.segments_adopted, 1u);
  EXPECT_EQ(stats.segment_allocations, 1u);
  write_sequence(taken, count, 500, second);
  gate.open();
  first.synchronize();
  // Had `second` not waited for the event, the kernels on `first` would have written after it.
  EXPECT_EQ(count_sequence_mismatches(taken, count, 500, second), 0u);
  arena.deallocate_async(taken, count * 4, second);
  second.synchronize();
}

TEST(CoalescingResourceOnGpu, AGraphGetsItsOwnMemoryAndWhatItFreedStaysOutOfUse) {
  CUDAPMR_REQUIRE_GPU();
  device_memory_resource device_memory(0, device_pool_options{});
  const cudapmr::stream stream(0);
  constexpr std::size_t count = mebibyte / 4;
  {
    coalescing_resource arena(device_memory);
    auto* before = static_cast<std::uint32_t*>(arena.allocate_async(mebibyte, stream));
    write_sequence(before, count, 3, stream);
    stream.synchronize();
    ASSERT_EQ(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeRelaxed), cudaSuccess);
    auto* in_graph = static_cast<std::uint32_t*>(arena.allocate_async(mebibyte, stream));
    write_sequence(in_graph, count, 7, stream);
    add_to_each(before, count, 1, stream);  // at every launch of the graph
    arena.deallocate_async(in_graph, mebibyte, stream);
    arena.deallocate_async(before, mebibyte, stream);
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(stream.get(), &graph), cudaSuccess);
    const graph_memory_nodes memory_nodes = count_memory_nodes(graph);
    EXPECT_EQ(memory_nodes.allocations, 1) << "the graph's block came from a segment";
    EXPECT_EQ(memory_nodes.frees, 1);
    EXPECT_EQ(arena.statistics().retired_blocks, 1u);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int launch = 0; launch < 2; ++launch) ASSERT_EQ(cudaGraphLaunch(exec, stream.get()), cudaSuccess);
    void* after = arena.allocate_async(mebibyte, stream);
    EXPECT_NE(after, static_cast<void*>(before)) << "a block freed during capture was reused";
    // Only the graph touched the retired block: once per launch.
    EXPECT_EQ(count_sequence_mismatches(before, count, 5, stream), 0u);
    arena.deallocate_async(after, mebibyte, stream);
    ASSERT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
    ASSERT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  }
  // Destroyed: after a synchronize, the retired block's segment went back too.
  device_memory.bound_stream().wait();
  EXPECT_EQ(device_memory.stats().used_current, 0u);
}

struct coalescing_maker {
  static coalescing_resource make(stream_ordered_resource& upstream, std::ostream& /*log*/) {
    return coalescing_resource(upstream);
  }
};

using coalescing_resource_cases = adaptor_over_each_kind<coalescing_maker>;
using coalescing_resource_exhaustible_cases = adaptor_over_exhaustible_kinds<coalescing_maker>;
CUDAPMR_INSTANTIATE_RESOURCE_CONTRACT(CoalescingResource, coalescing_resource_cases,
                                      coalescing_resource_exhaustible_cases);

}  // namespace
}  // namespace cudapmr::test
