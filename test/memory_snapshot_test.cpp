// SPDX-License-Identifier: Apache-2.0
// snapshot(): what each resource of a stack says about itself, the live
// blocks (from a tracking adaptor, else from a history), the history's
// events and annotations, and the peak over them.
#include "support/resource_cases.hpp"

#include <cudapmr/adaptors/coalescing_resource.hpp>
#include <cudapmr/memory_snapshot.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cudapmr::test {
namespace {

cudaStream_t fake_stream(std::uintptr_t id) { return reinterpret_cast<cudaStream_t>(id * 0x1000); }

TEST(MemorySnapshot, ListsEveryResourceOfTheStackTopFirstWithWhatEachCanTell) {
  host_memory_resource leaf(8 * mebibyte);
  limiting_adaptor capped(leaf, 6 * mebibyte);
  tracking_adaptor tracked(capped);
  history_adaptor history(tracked);
  statistics_adaptor counted(history);
  void* first = counted.allocate_async(mebibyte, fake_stream(1));
  void* second = counted.allocate_async(2 * mebibyte, fake_stream(2));
  counted.deallocate_async(first, mebibyte, fake_stream(1));

  const memory_snapshot taken = snapshot(counted);
  ASSERT_EQ(taken.resources.size(), 5u);
  EXPECT_EQ(taken.resources[0].name, "statistics_adaptor");
  EXPECT_EQ(taken.resources[1].name, "history_adaptor");
  EXPECT_EQ(taken.resources[2].name, "tracking_adaptor");
  EXPECT_EQ(taken.resources[3].name, "limiting_adaptor (cap 6291456 bytes)");
  EXPECT_EQ(taken.resources[4].name, leaf.description());

  ASSERT_TRUE(taken.resources[0].statistics.has_value());
  EXPECT_EQ(taken.resources[0].used_bytes, 2 * mebibyte);
  EXPECT_EQ(taken.resources[0].peak_used_bytes, 3 * mebibyte);
  EXPECT_EQ(taken.resources[2].used_bytes, 2 * mebibyte);
  EXPECT_EQ(taken.resources[3].cap_bytes, 6 * mebibyte);
  EXPECT_EQ(taken.resources[3].largest_free_block, 4 * mebibyte);
  EXPECT_EQ(taken.resources[4].cap_bytes, 8 * mebibyte);
  EXPECT_EQ(taken.resources[4].largest_free_block, 6 * mebibyte);
  EXPECT_FALSE(taken.resources[1].used_bytes.has_value()) << "a history counts nothing itself";

  ASSERT_EQ(taken.live_blocks.size(), 1u) << "the tracking adaptor's outstanding allocation";
  EXPECT_TRUE(taken.live_blocks_complete);
  EXPECT_EQ(taken.live_blocks[0].pointer, second);
  EXPECT_EQ(taken.live_blocks[0].stream, stream_ref(fake_stream(2)));
  EXPECT_EQ(taken.events.size(), 4u) << "two allocations, a free and its completion";
  EXPECT_EQ(taken.events_dropped, 0u);
  EXPECT_EQ(peak_live_bytes(taken), 3 * mebibyte);
  counted.deallocate_async(second, 2 * mebibyte, fake_stream(2));
}

TEST(MemorySnapshot, DescribesWhatAResourceHoldsInOneLineWithOnlyWhatItKnows) {
  resource_state state;
  EXPECT_EQ(describe_holdings(state), "") << "a resource that tells nothing";
  state.used_bytes = mebibyte;
  state.reserved_bytes = 32 * mebibyte;
  state.numa_node = 1;
  state.note = "plain host pool";
  const std::string line = describe_holdings(state);
  EXPECT_NE(line.find("used 1 MiB"), std::string::npos) << line;
  EXPECT_NE(line.find("reserved 32 MiB"), std::string::npos) << line;
  EXPECT_NE(line.find("on NUMA node 1"), std::string::npos) << line;
  EXPECT_NE(line.find("note: plain host pool"), std::string::npos) << line;
  EXPECT_EQ(line.find("cached"), std::string::npos) << "no cache was reported: " << line;
}

TEST(MemorySnapshot, WithoutATrackerLiveBlocksComeFromTheHistoryAndSayWhenIncomplete) {
  host_memory_resource leaf;
  history_adaptor history(leaf, {.capacity = 4});
  void* kept = history.allocate_async(512, fake_stream(1));
  const memory_snapshot early = snapshot(history);
  ASSERT_EQ(early.live_blocks.size(), 1u);
  EXPECT_EQ(early.live_blocks[0].pointer, kept);
  EXPECT_EQ(early.live_blocks[0].bytes, 512u);
  EXPECT_TRUE(early.live_blocks_complete);

  for (int i = 0; i < 4; ++i) history.deallocate_async(history.allocate_async(64, fake_stream(1)), 64, fake_stream(1));
  const memory_snapshot late = snapshot(history);
  EXPECT_FALSE(late.live_blocks_complete) << "the allocation of the live block left the ring";
  EXPECT_GT(late.events_dropped, 0u);
  EXPECT_TRUE(late.live_blocks.empty());
  history.deallocate_async(kept, 512, fake_stream(1));
}

TEST(MemorySnapshot, ACacheShowsWhatItHoldsPerStream) {
  host_memory_resource leaf;
  caching_resource cache(leaf);
  history_adaptor history(cache);
  void* on_first = history.allocate_async(4096, fake_stream(1));
  void* on_second = history.allocate_async(8192, fake_stream(2));
  history.deallocate_async(on_first, 4096, fake_stream(1));
  history.deallocate_async(on_second, 8192, fake_stream(2));

  const memory_snapshot taken = snapshot(history);
  ASSERT_EQ(taken.resources.size(), 3u);
  const resource_state& cached = taken.resources[1];
  EXPECT_EQ(cached.name, "caching_resource");
  ASSERT_TRUE(cached.cached_bytes.has_value());
  EXPECT_EQ(*cached.cached_bytes, 4096u + 8192u);
  std::size_t by_stream = 0;
  for (const stream_bytes& each : cached.cached_bytes_by_stream) by_stream += each.bytes;
  EXPECT_EQ(by_stream, *cached.cached_bytes);
  EXPECT_TRUE(taken.live_blocks.empty());
  EXPECT_TRUE(taken.live_blocks_complete);
}

TEST(MemorySnapshot, ASegmentArenaShowsWhatItHoldsAndWhatItCouldGiveBack) {
  constexpr std::size_t mib = std::size_t{1} << 20;  // segments are whole 2 MiB granules
  host_memory_resource leaf;
  coalescing_resource arena(leaf);
  statistics_adaptor counted(arena);
  void* kept = counted.allocate_async(4 * mib, fake_stream(1));
  counted.deallocate_async(counted.allocate_async(6 * mib, fake_stream(2)), 6 * mib, fake_stream(2));

  const memory_snapshot taken = snapshot(counted);
  ASSERT_EQ(taken.resources.size(), 3u);
  const resource_state& state = taken.resources[1];
  EXPECT_EQ(state.name, "coalescing_resource");
  EXPECT_EQ(state.used_bytes, std::optional<std::size_t>(4 * mib));
  EXPECT_EQ(state.reserved_bytes, std::optional<std::size_t>(10 * mib));
  EXPECT_EQ(state.cached_bytes, std::optional<std::size_t>(6 * mib));
  EXPECT_EQ(state.releasable_bytes, std::optional<std::size_t>(6 * mib)) << "stream 2's idle segment";
  EXPECT_EQ(state.largest_free_block, std::optional<std::size_t>(6 * mib));
  ASSERT_EQ(state.cached_bytes_by_stream.size(), 1u);
  EXPECT_EQ(state.cached_bytes_by_stream[0].stream, stream_ref(fake_stream(2)));
  EXPECT_EQ(arena.state().reserved_bytes, state.reserved_bytes) << "state() is what the snapshot lists";
  counted.deallocate_async(kept, 4 * mib, fake_stream(1));
}

TEST(MemorySnapshot, CarriesTheHistorysAnnotations) {
  host_memory_resource leaf;
  history_adaptor history(leaf);
  {
    const scoped_annotation phase(history, "warm-up");
    history.deallocate_async(history.allocate_async(64, fake_stream(1)), 64, fake_stream(1));
  }
  const memory_snapshot taken = snapshot(history);
  ASSERT_EQ(taken.annotations.size(), 2u);
  EXPECT_EQ(taken.annotations[0].name, "warm-up");
  EXPECT_LE(taken.annotations[0].time_ns, taken.events.front().time_ns);
  EXPECT_GE(taken.annotations[1].time_ns, taken.events.back().time_ns);
}

TEST(MemorySnapshot, OutOfMemoryReportSaysTrimmingWouldHelpWhenThePoolOrCacheHoldsEnough) {
  host_memory_resource leaf(4 * mebibyte);
  caching_resource cache(leaf);
  // A block freed on another stream stays cached: the host resource itself has 1 MiB left.
  void* cached = cache.allocate_async(3 * mebibyte, fake_stream(1));
  cache.deallocate_async(cached, 3 * mebibyte, fake_stream(1));
  const out_of_memory_report report = explain_out_of_memory(cache, 2 * mebibyte, 256, fake_stream(2));
  EXPECT_EQ(report.requested_bytes, 2 * mebibyte);
  EXPECT_EQ(report.reclaimable_bytes, 3 * mebibyte);
  EXPECT_FALSE(report.refused_by_cap);
  EXPECT_TRUE(report.trimming_would_make_room);
  EXPECT_FALSE(report.device_free_bytes.has_value()) << "pageable memory is no device's";
  EXPECT_NE(report.text.find("would have made room"), std::string::npos) << report.text;
  cache.release();
}

}  // namespace
}  // namespace cudapmr::test
