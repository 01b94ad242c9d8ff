// SPDX-License-Identifier: Apache-2.0
// statistics_adaptor: current, peak and total, overall and per stream, under
// 16 threads. Host tests use the host resource with made-up stream handles
// (it ignores streams; the adaptor counts by them).
#include "support/resource_contract.hpp"
#include "adaptors/gpu_upstreams.hpp"
#include "support/resource_cases.hpp"

#include <cudapmr/adaptors/statistics_adaptor.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

namespace cudapmr::test {
namespace {

cudaStream_t fake_stream(std::uintptr_t id) { return reinterpret_cast<cudaStream_t>(id * 0x1000); }

resource_statistics find_stream(const std::vector<stream_statistics>& streams, stream_ref stream) {
  const auto found = std::find_if(streams.begin(), streams.end(),
                                  [&](const stream_statistics& entry) { return entry.stream == stream; });
  return found == streams.end() ? resource_statistics{} : found->statistics;
}

TEST(StatisticsAdaptor, CountsCurrentPeakAndTotalBytesAndAllocations) {
  host_memory_resource upstream;
  statistics_adaptor statistics(upstream);
  EXPECT_EQ(statistics.statistics(), resource_statistics{});

  void* a = statistics.allocate_async(1000, stream_ref{});
  void* b = statistics.allocate_async(3000, stream_ref{});
  EXPECT_EQ(statistics.statistics(), (resource_statistics{{4000, 4000, 4000}, {2, 2, 2}}));
  statistics.deallocate_async(b, 3000, stream_ref{});
  EXPECT_EQ(statistics.statistics(), (resource_statistics{{1000, 4000, 4000}, {1, 2, 2}}));
  void* c = statistics.allocate(500, 64);  // the pmr path counts too
  EXPECT_EQ(statistics.statistics(), (resource_statistics{{1500, 4000, 4500}, {2, 2, 3}}));
  statistics.deallocate(c, 500, 64);
  statistics.deallocate_async(a, 1000, stream_ref{});
  EXPECT_EQ(statistics.statistics(), (resource_statistics{{0, 4000, 4500}, {0, 2, 3}}));
  EXPECT_EQ(upstream.used_bytes(), 0u);
}

TEST(StatisticsAdaptor, ResetPeakLowersPeaksToCurrent) {
  host_memory_resource upstream;
  statistics_adaptor statistics(upstream);
  void* large = statistics.allocate_async(1 << 20, fake_stream(1));
  void* small = statistics.allocate_async(100, fake_stream(1));
  statistics.deallocate_async(large, 1 << 20, fake_stream(1));
  statistics.reset_peak();
  EXPECT_EQ(statistics.statistics().bytes.peak, 100);
  EXPECT_EQ(statistics.statistics().allocations.peak, 1);
  EXPECT_EQ(statistics.statistics(fake_stream(1)).bytes.peak, 100);
  EXPECT_EQ(statistics.statistics().bytes.total, (1 << 20) + 100) << "totals survive a reset";
  void* more = statistics.allocate_async(50, fake_stream(1));
  EXPECT_EQ(statistics.statistics().bytes.peak, 150);
  statistics.deallocate_async(more, 50, fake_stream(1));
  statistics.deallocate_async(small, 100, fake_stream(1));
}

TEST(StatisticsAdaptor, CountsEachStreamApart) {
  host_memory_resource upstream;
  statistics_adaptor statistics(upstream);
  void* on_first = statistics.allocate_async(100, fake_stream(1));
  void* on_second = statistics.allocate_async(200, fake_stream(2));
  void* also_second = statistics.allocate_async(300, fake_stream(2));
  EXPECT_EQ(statistics.statistics(fake_stream(1)), (resource_statistics{{100, 100, 100}, {1, 1, 1}}));
  EXPECT_EQ(statistics.statistics(fake_stream(2)), (resource_statistics{{500, 500, 500}, {2, 2, 2}}));
  EXPECT_EQ(statistics.statistics(fake_stream(3)), resource_statistics{}) << "a stream never seen";
  const std::vector<stream_statistics> streams = statistics.per_stream();
  EXPECT_EQ(streams.size(), 2u);
  EXPECT_EQ(find_stream(streams, fake_stream(2)).bytes.current, 500);

  // Memory freed on another stream than its own counts against the freeing stream.
  statistics.deallocate_async(on_first, 100, fake_stream(2));
  EXPECT_EQ(statistics.statistics(fake_stream(1)).bytes.current, 100);
  EXPECT_EQ(statistics.statistics(fake_stream(2)).bytes.current, 400);
  statistics.deallocate_async(on_second, 200, fake_stream(2));
  statistics.deallocate_async(also_second, 300, fake_stream(2));
  EXPECT_EQ(statistics.statistics().bytes.current, 0);
}

TEST(StatisticsAdaptor, StreamsPastTheTableShareOneEntry) {
  host_memory_resource upstream;
  statistics_adaptor statistics(upstream);
  constexpr std::size_t streams = detail::stream_statistics_table::capacity + 10;
  for (std::uintptr_t id = 1; id <= streams; ++id) {
    void* p = statistics.allocate_async(8, fake_stream(id));
    statistics.deallocate_async(p, 8, fake_stream(id));
  }
  EXPECT_EQ(statistics.per_stream().size(), detail::stream_statistics_table::capacity);
  EXPECT_EQ(statistics.other_streams().allocations.total, 10);
  EXPECT_EQ(statistics.statistics().allocations.total, static_cast<std::int64_t>(streams));
}

TEST(StatisticsAdaptor, PerStreamCountingCanBeTurnedOff) {
  host_memory_resource upstream;
  statistics_adaptor statistics(upstream, {.per_stream = false});
  void* p = statistics.allocate_async(64, fake_stream(1));
  EXPECT_TRUE(statistics.per_stream().empty());
  EXPECT_EQ(statistics.statistics(fake_stream(1)), resource_statistics{});
  EXPECT_EQ(statistics.statistics().bytes.current, 64);
  statistics.deallocate_async(p, 64, fake_stream(1));
}

TEST(StatisticsAdaptor, FailedAndZeroByteAllocationsAreNotCounted) {
  host_memory_resource upstream(1000);
  statistics_adaptor statistics(upstream);
  void* p = statistics.allocate_async(600, stream_ref{});
  EXPECT_THROW(static_cast<void>(statistics.allocate_async(600, stream_ref{})), out_of_memory);
  EXPECT_EQ(statistics.allocate_async(0, stream_ref{}), nullptr);
  EXPECT_EQ(statistics.statistics(), (resource_statistics{{600, 600, 600}, {1, 1, 1}}));
  statistics.deallocate_async(p, 600, stream_ref{});
}

TEST(StatisticsAdaptor, SixteenThreadsCountExactly) {
  host_memory_resource upstream;
  statistics_adaptor statistics(upstream);
  constexpr int threads = 16;
  constexpr int iterations = 2000;
  constexpr std::size_t live_per_thread = 4;
  std::vector<std::int64_t> bytes_by_thread(threads, 0);
  std::vector<std::thread> workers;
  for (int index = 0; index < threads; ++index) {
    workers.emplace_back([&, index] {
      const stream_ref stream = fake_stream(static_cast<std::uintptr_t>(index % 4 + 1));
      std::mt19937 random(static_cast<unsigned>(index));
      std::uniform_int_distribution<std::size_t> size(1, 4096);
      std::vector<std::pair<void*, std::size_t>> live;
      for (int i = 0; i < iterations; ++i) {
        const std::size_t bytes = size(random);
        live.emplace_back(statistics.allocate_async(bytes, stream), bytes);
        bytes_by_thread[static_cast<std::size_t>(index)] += static_cast<std::int64_t>(bytes);
        if (live.size() > live_per_thread) {
          statistics.deallocate_async(live.front().first, live.front().second, stream);
          live.erase(live.begin());
        }
      }
      for (const auto& [p, bytes] : live) statistics.deallocate_async(p, bytes, stream);
    });
  }
  for (std::thread& worker : workers) worker.join();

  std::int64_t total_bytes = 0;
  for (const std::int64_t bytes : bytes_by_thread) total_bytes += bytes;
  const resource_statistics overall = statistics.statistics();
  EXPECT_EQ(overall.bytes.current, 0);
  EXPECT_EQ(overall.allocations.current, 0);
  EXPECT_EQ(overall.bytes.total, total_bytes);
  EXPECT_EQ(overall.allocations.total, threads * iterations);
  // Each thread holds at most live_per_thread + 1 allocations of at most 4096 bytes.
  EXPECT_GE(overall.allocations.peak, static_cast<std::int64_t>(live_per_thread) + 1);
  EXPECT_LE(overall.allocations.peak, threads * static_cast<std::int64_t>(live_per_thread + 1));
  EXPECT_LE(overall.bytes.peak, threads * static_cast<std::int64_t>(live_per_thread + 1) * 4096);

  std::int64_t stream_totals = 0;
  for (const stream_statistics& entry : statistics.per_stream()) {
    EXPECT_EQ(entry.statistics.bytes.current, 0);
    EXPECT_EQ(entry.statistics.allocations.total, 4 * iterations) << "four threads per stream";
    stream_totals += entry.statistics.bytes.total;
  }
  EXPECT_EQ(stream_totals, total_bytes);
  EXPECT_EQ(upstream.used_bytes(), 0u);
}

TEST(StatisticsAdaptor, CountsOnTheGpuKinds) {
  CUDAPMR_REQUIRE_GPU();
  const cudapmr::stream stream(0);
  gpu_upstreams upstreams;
  for (stream_ordered_resource* upstream : upstreams.all()) {
    statistics_adaptor statistics(*upstream);
    void* on_stream = statistics.allocate_async(mebibyte, stream);
    void* synchronous = statistics.allocate(3 * mebibyte);
    const auto expected_peak = static_cast<std::int64_t>(4 * mebibyte);
    EXPECT_EQ(statistics.statistics().bytes.current, expected_peak) << upstream->description();
    EXPECT_EQ(statistics.statistics(stream).bytes.current, static_cast<std::int64_t>(mebibyte));
    EXPECT_EQ(statistics.statistics(statistics.bound_stream()).bytes.current, 3 * static_cast<std::int64_t>(mebibyte));
    statistics.deallocate_async(on_stream, mebibyte, stream);
    statistics.deallocate(synchronous, 3 * mebibyte);
    stream.synchronize();
    EXPECT_EQ(statistics.statistics().bytes.current, 0);
    EXPECT_EQ(statistics.statistics().bytes.peak, expected_peak);
  }
}

// The shared contract, over the host resource and each kind's owned pool.
using statistics_adaptor_cases = adaptor_over_each_kind<statistics_maker>;
using statistics_adaptor_exhaustible_cases = adaptor_over_exhaustible_kinds<statistics_maker>;
CUDAPMR_INSTANTIATE_RESOURCE_CONTRACT(StatisticsAdaptor, statistics_adaptor_cases, statistics_adaptor_exhaustible_cases);

}  // namespace
}  // namespace cudapmr::test
