// SPDX-License-Identifier: Apache-2.0
// history_adaptor: the events it records and keeps, its ring's bound, its
// annotations, and the report an out_of_memory carries through it.
#include "support/resource_contract.hpp"
#include "support/call_site.hpp"
#include "support/gpu.hpp"
#include "support/resource_cases.hpp"

#include <cudapmr/adaptors/caching_resource.hpp>
#include <cudapmr/adaptors/coalescing_resource.hpp>
#include <cudapmr/adaptors/history_adaptor.hpp>
#include <cudapmr/detail/thread_ordinal.hpp>
#include <cudapmr/memory_snapshot.hpp>
#include <cudapmr/snapshot_export.hpp>
#include <cudapmr/device_memory_resource.hpp>
#include <cudapmr/device.hpp>
#include <cudapmr/stream.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace cudapmr::test {
namespace {

cudaStream_t fake_stream(std::uintptr_t id) { return reinterpret_cast<cudaStream_t>(id * 0x1000); }

TEST(HistoryAdaptor, RecordsEachAllocationAndFreeInOrder) {
  host_memory_resource upstream;
  history_adaptor history(upstream);
  void* p = history.allocate_async(100, 64, fake_stream(1));
  history.deallocate_async(p, 100, 64, fake_stream(2));
  const std::vector<history_event> events = history.events();
  ASSERT_EQ(events.size(), 3u) << "allocate, free, and free_completed (pageable memory frees at once)";
  EXPECT_EQ(events[0].action, history_action::allocate);
  EXPECT_EQ(events[0].pointer, p);
  EXPECT_EQ(events[0].bytes, 100u);
  EXPECT_EQ(events[0].alignment, 64u);
  EXPECT_EQ(events[0].stream, stream_ref(fake_stream(1)));
  EXPECT_EQ(events[0].thread, detail::thread_ordinal());
  EXPECT_EQ(events[0].sequence, 1u);
  EXPECT_TRUE(events[0].call_stack.empty()) << "call stacks only when asked for";
  EXPECT_EQ(events[1].action, history_action::free);
  EXPECT_EQ(events[1].stream, stream_ref(fake_stream(2)));
  EXPECT_EQ(events[2].action, history_action::free_completed);
  EXPECT_LE(events[0].time_ns, events[1].time_ns);
  EXPECT_LE(events[1].time_ns, events[2].time_ns);
  EXPECT_EQ(history.recorded(), 3u);
  EXPECT_EQ(history.dropped(), 0u);
}

TEST(HistoryAdaptor, ZeroByteRequestsAreNotRecorded) {
  host_memory_resource upstream;
  history_adaptor history(upstream);
  void* p = history.allocate_async(0, fake_stream(1));
  history.deallocate_async(p, 0, fake_stream(1));
  for (const history_event& event : history.events()) EXPECT_NE(event.action, history_action::allocate);
}

TEST(HistoryAdaptor, KeepsOnlyTheLatestEventsOfItsCapacity) {
  host_memory_resource upstream;
  history_adaptor history(upstream, {.capacity = 5});  // rounded up to 8
  EXPECT_EQ(history.capacity(), 8u);
  for (int i = 0; i < 10; ++i) {
    void* p = history.allocate_async(64, fake_stream(1));
    history.deallocate_async(p, 64, fake_stream(1));
  }
  const std::vector<history_event> events = history.events();
  ASSERT_EQ(events.size(), 8u);
  EXPECT_EQ(events.front().sequence, 23u) << "the oldest of the last eight of thirty events";
  EXPECT_EQ(events.back().sequence, 30u);
  EXPECT_EQ(history.recorded(), 30u);
  EXPECT_EQ(history.dropped(), 22u);
}

TEST(HistoryAdaptor, CapturesCallStacksWhenAskedUpToTheirDepth) {
  host_memory_resource upstream;
  history_adaptor history(upstream, {.capture_call_stacks = true, .call_stack_depth = 4});
  void* p = history.allocate_async(64, fake_stream(1));
  history.deallocate_async(p, 64, fake_stream(1));
  const std::vector<history_event> events = history.events();
  ASSERT_FALSE(events.empty());
  EXPECT_FALSE(events[0].call_stack.empty());
  EXPECT_LE(events[0].call_stack.size(), 4u);
  EXPECT_TRUE(events[1].call_stack.empty()) << "frees record no call stack";
}

TEST(HistoryAdaptor, ACallStackStartsInTheFunctionThatAllocated) {
  // The first frame was the caller's caller where allocate_async tail-called
  // the adaptor (an optimized build): the count of frames skipped was fixed.
  host_memory_resource upstream;
  history_adaptor history(upstream, {.capture_call_stacks = true});
  void* direct = allocate_from_a_call_site(history, 64);
  void* through_pmr = allocate_through_pmr_from_a_call_site(history, 64);
  const std::vector<history_event> events = history.events();
  ASSERT_EQ(events.size(), 2u);
  ASSERT_FALSE(events[0].call_stack.empty());
  ASSERT_FALSE(events[1].call_stack.empty());
  EXPECT_TRUE(returns_into_direct_call_site(events[0].call_stack[0])) << events[0].call_stack[0];
  EXPECT_TRUE(returns_into_pmr_call_site(events[1].call_stack[0])) << events[1].call_stack[0];
  history.deallocate_async(direct, 64, stream_ref{});
  history.deallocate(through_pmr, 64, 256);
}

TEST(HistoryAdaptor, RefusesACapacityPastItsLimitNamingIt) {
  host_memory_resource upstream;
  // Past 2^63 no power of two holds it: rounding up must not wrap to a tiny ring.
  for (const std::size_t capacity : {(std::size_t{1} << 63) + 1, std::numeric_limits<std::size_t>::max(),
                                     history_options::max_capacity + 1}) {
    try {
      const history_adaptor history(upstream, {.capacity = capacity});
      ADD_FAILURE() << "a capacity of " << capacity << " events was taken: the ring holds " << history.capacity();
    } catch (const std::invalid_argument& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("history_options::capacity of " + std::to_string(capacity)), std::string::npos) << message;
      EXPECT_NE(message.find(std::to_string(history_options::max_capacity)), std::string::npos) << message;
    }
  }
}

TEST(HistoryAdaptor, RefusesACallStackDepthPastItsLimitNamingIt) {
  host_memory_resource upstream;
  // capacity x depth frames would wrap around size_t to a ring of a few frames.
  const std::size_t wrapping = (std::numeric_limits<std::size_t>::max() / 8) + 1;
  for (const std::size_t depth : {history_options::max_call_stack_depth + 1, wrapping}) {
    try {
      const history_adaptor history(upstream, {.capacity = 8, .capture_call_stacks = true, .call_stack_depth = depth});
      ADD_FAILURE() << "a call stack depth of " << depth << " frames was taken";
    } catch (const std::invalid_argument& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("history_options::call_stack_depth of " + std::to_string(depth)), std::string::npos)
          << message;
      EXPECT_NE(message.find(std::to_string(history_options::max_call_stack_depth)), std::string::npos) << message;
    }
  }
}

TEST(HistoryAdaptor, TakesOptionsAtTheirLimits) {
  host_memory_resource upstream;
  history_adaptor smallest(upstream, {.capacity = 0});
  EXPECT_EQ(smallest.capacity(), 2u) << "a ring of at least two events";
  history_adaptor deepest(upstream, {.capacity = 4,
                                     .capture_call_stacks = true,
                                     .call_stack_depth = history_options::max_call_stack_depth});
  EXPECT_EQ(deepest.options().call_stack_depth, history_options::max_call_stack_depth);
  for (int i = 0; i < 6; ++i) {  // round the ring, so that every slot's frames are written
    void* p = deepest.allocate_async(64, fake_stream(1));
    deepest.deallocate_async(p, 64, fake_stream(1));
  }
  const std::vector<history_event> events = deepest.events();
  ASSERT_EQ(events.size(), 4u);
  for (const history_event& event : events)
    EXPECT_LE(event.call_stack.size(), history_options::max_call_stack_depth);
}

TEST(HistoryAdaptor, ConcurrentThreadsLoseNoEvent) {
  host_memory_resource upstream;
  history_adaptor history(upstream, {.capacity = 1 << 16});
  constexpr int threads = 4;
  constexpr int rounds = 1000;
  {
    std::vector<std::jthread> workers;
    for (int t = 0; t < threads; ++t)
      workers.emplace_back([&history] {
        for (int i = 0; i < rounds; ++i) {
          void* p = history.allocate_async(32, fake_stream(1));
          history.deallocate_async(p, 32, fake_stream(1));
        }
      });
  }
  const std::vector<history_event> events = history.events();
  ASSERT_EQ(events.size(), std::size_t{threads} * rounds * 3);
  std::set<std::uint64_t> sequences;
  for (const history_event& event : events) sequences.insert(event.sequence);
  EXPECT_EQ(sequences.size(), events.size()) << "every event has a sequence of its own";
  EXPECT_EQ(*sequences.rbegin(), events.size());
}

TEST(HistoryAdaptor, AnnotationsMarkNamedRegions) {
  host_memory_resource upstream;
  history_adaptor history(upstream);
  {
    const scoped_annotation forward(history, "forward");
    history.annotate_begin("inner");
    history.annotate_end("inner");
  }
  const std::vector<history_annotation> marks = history.annotations();
  ASSERT_EQ(marks.size(), 4u);
  EXPECT_EQ(marks[0].name, "forward");
  EXPECT_EQ(marks[0].stage, annotation_stage::begin);
  EXPECT_EQ(marks[1].name, "inner");
  EXPECT_EQ(marks[2].stage, annotation_stage::end);
  EXPECT_EQ(marks[3].name, "forward");
  EXPECT_EQ(marks[3].stage, annotation_stage::end);
  EXPECT_LE(marks[0].time_ns, marks[3].time_ns);
}

TEST(HistoryAdaptor, OutOfMemoryIsRecordedAndExplained) {
  host_memory_resource upstream(4 * mebibyte);
  history_adaptor history(upstream, {.capture_call_stacks = true});
  void* held = history.allocate_async(3 * mebibyte, fake_stream(7));
  try {
    static_cast<void>(history.allocate_async(2 * mebibyte, fake_stream(1)));
    ADD_FAILURE() << "2 MiB were granted past a 4 MiB capacity holding 3 MiB";
  } catch (const out_of_memory& error) {
    EXPECT_EQ(error.requested_bytes(), 2 * mebibyte);
    ASSERT_NE(error.report(), nullptr);
    const out_of_memory_report& report = *error.report();
    EXPECT_EQ(report.requested_bytes, 2 * mebibyte);
    EXPECT_EQ(report.live_bytes, 3 * mebibyte);
    EXPECT_EQ(report.live_blocks, 1u);
    EXPECT_TRUE(report.live_complete);
    ASSERT_EQ(report.top_streams.size(), 1u);
    EXPECT_EQ(report.top_streams[0].stream, stream_ref(fake_stream(7)));
    ASSERT_EQ(report.top_call_sites.size(), 1u);
    EXPECT_EQ(report.top_call_sites[0].bytes, 3 * mebibyte);
    EXPECT_TRUE(report.refused_by_cap) << "the host resource's capacity refused";
    EXPECT_FALSE(report.trimming_would_make_room);
    const std::string message = error.what();
    EXPECT_NE(message.find("2097152 bytes"), std::string::npos) << message;
    EXPECT_NE(message.find("out-of-memory report"), std::string::npos) << message;
    EXPECT_NE(message.find("live: 3 MiB in 1 block"), std::string::npos) << message;
  }
  const std::vector<history_event> events = history.events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].action, history_action::out_of_memory);
  EXPECT_EQ(events[1].bytes, 2 * mebibyte);
  EXPECT_EQ(events[1].pointer, nullptr);
  EXPECT_FALSE(events[1].device_free_bytes.has_value()) << "host memory: no device to ask";
  history.deallocate_async(held, 3 * mebibyte, fake_stream(7));
}

TEST(HistoryAdaptor, OutOfMemoryOfDeviceMemoryRecordsTheDevicesFreeMemory) {
  // PyTorch's viewer reads the free memory of each "oom" entry; the trace wrote 0 for it.
  CUDAPMR_REQUIRE_GPU();
  device_memory_resource pool(0, device_pool_options{.max_size = 64 * mebibyte});
  history_adaptor history(pool);
  const cudapmr::stream stream(0);
  EXPECT_THROW(static_cast<void>(history.allocate_async(128 * mebibyte, stream.ref())), out_of_memory);
  const std::vector<history_event> events = history.events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].action, history_action::out_of_memory);
  EXPECT_EQ(events[0].pointer, nullptr);
  ASSERT_TRUE(events[0].device_free_bytes.has_value());
  EXPECT_GT(*events[0].device_free_bytes, 0u);
  EXPECT_LE(*events[0].device_free_bytes, device(0).total_memory());
  const std::string json = to_json(snapshot(history));
  EXPECT_NE(json.find("\"device_free_bytes\":" + std::to_string(*events[0].device_free_bytes)), std::string::npos)
      << json;
}

// A cache or a segment arena above the history rewords the refusal for its
// own request; the report the history attached must reach the caller with it.
TEST(HistoryAdaptor, AReportSurvivesTheResourcesThatRewordTheRefusalAboveIt) {
  host_memory_resource upstream(mebibyte);
  history_adaptor history(upstream, {.explained_refusals = 16});
  caching_resource cache(history);
  coalescing_resource arena(history);
  for (stream_ordered_resource* top : std::initializer_list<stream_ordered_resource*>{&cache, &arena}) {
    try {
      static_cast<void>(top->allocate_async(2 * mebibyte, cudaStream_t{}));
      ADD_FAILURE() << top->description() << " granted 2 MiB over a 1 MiB capacity";
    } catch (const out_of_memory& error) {
      EXPECT_EQ(error.requested_bytes(), 2 * mebibyte);
      ASSERT_NE(error.report(), nullptr) << top->description() << " dropped the report: " << error.what();
      EXPECT_TRUE(error.report()->refused_by_cap);
      const std::string message = error.what();
      EXPECT_NE(message.find(top->description()), std::string::npos) << message;
      EXPECT_NE(message.find("out-of-memory report"), std::string::npos) << message;
    }
  }
}

TEST(HistoryAdaptor, ExplainsOnlyAsManyRefusalsAsAskedButRecordsEach) {
  host_memory_resource upstream(mebibyte);
  history_adaptor history(upstream, {.explained_refusals = 1});
  for (const bool explained : {true, false}) {
    try {
      static_cast<void>(history.allocate_async(2 * mebibyte, fake_stream(1)));
      ADD_FAILURE() << "2 MiB were granted past a 1 MiB capacity";
    } catch (const out_of_memory& error) {
      EXPECT_EQ(error.report() != nullptr, explained);
    }
  }
  const std::vector<history_event> events = history.events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].action, history_action::out_of_memory);
}

// The shared contract, over the host resource and each kind's owned pool.
using history_adaptor_cases = adaptor_over_each_kind<history_maker>;
using history_adaptor_exhaustible_cases = adaptor_over_exhaustible_kinds<history_maker>;
CUDAPMR_INSTANTIATE_RESOURCE_CONTRACT(HistoryAdaptor, history_adaptor_cases, history_adaptor_exhaustible_cases);

}  // namespace
}  // namespace cudapmr::test
