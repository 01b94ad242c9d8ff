// SPDX-License-Identifier: Apache-2.0
// The log -> replay round trip (apps/replay): a multi-threaded run logged by
// a logging_adaptor replays with the same peak, over the host resource here
// and over each CUDA kind on the GPU.
#include "adaptors/gpu_upstreams.hpp"
#include "support/resource_cases.hpp"

#include <replay.hpp>

#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <stdexcept>
#include <string>

namespace cudapmr::test {
namespace {

struct recording {
  std::string log;
  resource_statistics statistics;
};

/// Runs the synthetic workload through statistics(logging(upstream)).
recording record(stream_ordered_resource& upstream, const replay::workload_options& options) {
  std::ostringstream sink;
  recording recorded;
  {
    logging_adaptor logged(upstream, sink);
    statistics_adaptor counted(logged);
    replay::run_workload(counted, options);
    recorded.statistics = counted.statistics();
  }
  recorded.log = sink.str();
  return recorded;
}

std::vector<replay::event> parse(const std::string& log) {
  std::istringstream in(log);
  return replay::read_log(in);
}

constexpr replay::workload_options sixteen_threads{.threads = 16, .allocations_per_thread = 400, .max_bytes = 64 * 1024};

TEST(Replay, ReproducesThePeakOfASixteenThreadRun) {
  host_memory_resource original;
  const recording recorded = record(original, sixteen_threads);
  const std::vector<replay::event> events = parse(recorded.log);
  ASSERT_EQ(events.size(), 2u * 16u * 400u);
  EXPECT_EQ(replay::peak_bytes(events), static_cast<std::size_t>(recorded.statistics.bytes.peak));

  host_memory_resource target;
  const replay::result replayed = replay::run(events, target);
  EXPECT_EQ(replayed.events, events.size());
  EXPECT_EQ(replayed.threads, 16u);
  EXPECT_EQ(replayed.statistics.bytes.peak, recorded.statistics.bytes.peak);
  EXPECT_EQ(replayed.statistics.bytes.total, recorded.statistics.bytes.total);
  EXPECT_EQ(replayed.statistics.allocations.peak, recorded.statistics.allocations.peak);
  EXPECT_EQ(replayed.statistics.bytes.current, 0);
  EXPECT_EQ(replayed.failures, 0u);
  EXPECT_EQ(replayed.unmatched_frees, 0u);
  EXPECT_EQ(replayed.left_outstanding, 0u);
  EXPECT_EQ(target.used_bytes(), 0u);
}

TEST(Replay, RunsEachLoggedThreadsEventsOnOneThreadOfItsOwn) {
  host_memory_resource original;
  const recording recorded = record(original, {.threads = 4, .allocations_per_thread = 100, .max_bytes = 1024});
  const std::vector<replay::event> events = parse(recorded.log);
  // Replaying into a logging adaptor logs the replay: the same events, in the
  // same order, each logged thread's events on one replay thread.
  std::ostringstream relog;
  host_memory_resource target;
  {
    logging_adaptor logged(target, relog);
    static_cast<void>(replay::run(events, logged));
  }
  const std::vector<replay::event> replayed = parse(relog.str());
  ASSERT_EQ(replayed.size(), events.size());
  std::map<std::uint64_t, std::set<std::uint64_t>> replay_threads_of;
  for (std::size_t i = 0; i < events.size(); ++i) {
    ASSERT_EQ(replayed[i].action, events[i].action) << "event " << i;
    ASSERT_EQ(replayed[i].bytes, events[i].bytes) << "event " << i;
    ASSERT_EQ(replayed[i].alignment, events[i].alignment) << "event " << i;
    replay_threads_of[events[i].thread].insert(replayed[i].thread);
  }
  EXPECT_EQ(replay_threads_of.size(), 4u);
  std::set<std::uint64_t> all_replay_threads;
  for (const auto& [logged, replay_threads] : replay_threads_of) {
    EXPECT_EQ(replay_threads.size(), 1u) << "logged thread " << logged;
    all_replay_threads.insert(replay_threads.begin(), replay_threads.end());
  }
  EXPECT_EQ(all_replay_threads.size(), 4u);
}

TEST(Replay, CountsTheAllocationsACapRefuses) {
  host_memory_resource original;
  const recording recorded = record(original, {.threads = 4, .allocations_per_thread = 200, .max_bytes = 4096});
  const std::vector<replay::event> events = parse(recorded.log);
  host_memory_resource upstream;
  limiting_adaptor capped(upstream, static_cast<std::size_t>(recorded.statistics.bytes.peak) - 1);
  const replay::result replayed = replay::run(events, capped);
  EXPECT_GT(replayed.failures, 0u);
  EXPECT_LT(replayed.statistics.bytes.peak, recorded.statistics.bytes.peak);
  EXPECT_EQ(upstream.used_bytes(), 0u) << "the frees of refused allocations are skipped, the rest freed";
}

TEST(Replay, ReplaysLoggedFailuresAndToleratesALogStartedMidRun) {
  const std::string log = std::string(logging_adaptor::csv_header) +
                          "\n"
                          "1,0,1,deallocate,0x5000,64,256,0x0,pageable\n"        // allocated before the log began
                          "2,10,1,allocate,0x1000,100,256,0x0,pageable\n"
                          "3,20,2,allocate_failed,0x0,5000,256,0x0,pageable\n"
                          "4,30,2,allocate,0x2000,300,512,0x0,pageable\n"
                          "5,40,1,deallocate,0x2000,300,512,0x0,pageable\n";  // freed by another thread
  const std::vector<replay::event> events = parse(log);
  EXPECT_EQ(replay::peak_bytes(events), 400u);
  host_memory_resource target(4096);
  const replay::result replayed = replay::run(events, target);
  EXPECT_EQ(replayed.unmatched_frees, 1u);
  EXPECT_EQ(replayed.logged_failures, 1u);
  EXPECT_EQ(replayed.failures, 1u) << "5000 bytes fail here too";
  EXPECT_EQ(replayed.left_outstanding, 1u);
  EXPECT_EQ(replayed.statistics.bytes.peak, 400);
  EXPECT_EQ(replayed.threads, 2u);
  EXPECT_EQ(target.used_bytes(), 0u);
}

TEST(Replay, EventsAreSortedBySequence) {
  const std::string log = std::string(logging_adaptor::csv_header) +
                          "\n2,10,1,deallocate,0x1000,100,256,0x0,pageable\n"
                          "1,0,1,allocate,0x1000,100,256,0x0,pageable\n";
  const std::vector<replay::event> events = parse(log);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].action, log_action::allocate);
  EXPECT_EQ(events[0].pointer, 0x1000u);
  EXPECT_EQ(events[1].action, log_action::deallocate);
}

TEST(Replay, MalformedLogsAreRefusedNamingTheLine) {
  const std::string header(logging_adaptor::csv_header);
  const std::vector<std::pair<std::string, std::string>> bad_logs{
      {"time,what\n", "line 1"},
      {header + "\n1,0,1,allocate,0x1000,100,256,0x0\n", "line 2: 8 fields"},
      {header + "\n1,0,1,reallocate,0x1000,100,256,0x0,pageable\n", "unknown action 'reallocate'"},
      {header + "\n1,0,1,allocate,0x1000,many,256,0x0,pageable\n", "byte count is not a number"},
      {header + "\n1,0,1,allocate,0x1000,1,256,0x0,pageable\n1,0,1,allocate,0x2000,1,256,0x0,pageable\n",
       "sequence number 1 appears twice"}};
  for (const auto& [log, expected] : bad_logs) {
    try {
      static_cast<void>(parse(log));
      ADD_FAILURE() << "accepted:\n" << log;
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
    }
  }
}

TEST(Replay, ReproducesThePeakOnEachGpuKind) {
  CUDAPMR_REQUIRE_GPU();
  device_memory_resource original(0, device_pool_options{});
  const recording recorded = record(original, sixteen_threads);
  const std::vector<replay::event> events = parse(recorded.log);
  ASSERT_EQ(events.size(), 2u * 16u * 400u);
  gpu_upstreams targets;
  for (pool_resource* target : targets.all()) {
    const replay::result replayed = replay::run(events, *target);
    EXPECT_EQ(replayed.statistics.bytes.peak, recorded.statistics.bytes.peak) << target->description();
    EXPECT_EQ(replayed.streams, 16u);
    EXPECT_EQ(replayed.failures, 0u);
    EXPECT_EQ(target->stats().used_current, 0u) << "everything was freed";
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
}

}  // namespace
}  // namespace cudapmr::test
