// SPDX-License-Identifier: Apache-2.0
// limiting_adaptor: the cap at its exact boundary, its message, and threads.
#include "support/resource_contract.hpp"
#include "adaptors/gpu_upstreams.hpp"
#include "support/resource_cases.hpp"

#include <cudapmr/adaptors/limiting_adaptor.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace cudapmr::test {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(LimitingAdaptor, AllowsExactlyTheCap) {
  host_memory_resource upstream;
  limiting_adaptor limited(upstream, 1000);
  void* all = limited.allocate_async(1000, stream_ref{});
  EXPECT_EQ(limited.used_bytes(), 1000u);
  EXPECT_THROW(static_cast<void>(limited.allocate_async(1, stream_ref{})), out_of_memory);
  EXPECT_EQ(limited.allocate_async(0, stream_ref{}), nullptr) << "zero bytes fit even at the cap";
  limited.deallocate_async(all, 1000, stream_ref{});
  EXPECT_EQ(limited.used_bytes(), 0u);
}

TEST(LimitingAdaptor, RefusesOneBytePastTheCapAndThenKeepsWorking) {
  host_memory_resource upstream;
  limiting_adaptor limited(upstream, 1000);
  void* some = limited.allocate_async(600, stream_ref{});
  EXPECT_THROW(static_cast<void>(limited.allocate_async(401, stream_ref{})), out_of_memory);
  EXPECT_THROW(static_cast<void>(limited.allocate(401)), std::bad_alloc);  // the pmr path too
  EXPECT_EQ(limited.used_bytes(), 600u) << "a refusal reserves nothing";
  EXPECT_EQ(upstream.used_bytes(), 600u) << "a refusal never reaches the upstream";
  void* rest = limited.allocate_async(400, stream_ref{});
  EXPECT_EQ(limited.used_bytes(), 1000u);
  limited.deallocate_async(rest, 400, stream_ref{});
  limited.deallocate_async(some, 600, stream_ref{});
}

TEST(LimitingAdaptor, RefusalNamesTheCapTheUsageAndTheRequest) {
  host_memory_resource upstream;
  limiting_adaptor limited(upstream, 1000);
  void* some = limited.allocate_async(600, stream_ref{});
  try {
    static_cast<void>(limited.allocate_async(450, 512, stream_ref{}));
    ADD_FAILURE() << "450 bytes over 600 of 1000 were granted";
  } catch (const out_of_memory& error) {
    const std::string message = error.what();
    EXPECT_EQ(error.requested_bytes(), 450u);
    EXPECT_TRUE(contains(message, "cap is 1000 bytes")) << message;
    EXPECT_TRUE(contains(message, "600 bytes are in use")) << message;
    EXPECT_TRUE(contains(message, "450 bytes")) << message;
    EXPECT_TRUE(contains(message, "by 50 bytes")) << message;
    EXPECT_TRUE(contains(message, "alignment 512")) << message;
    EXPECT_TRUE(contains(message, limited.description())) << message;
  }
  limited.deallocate_async(some, 600, stream_ref{});
}

TEST(LimitingAdaptor, CountsRequestedBytesNotAlignmentPadding) {
  host_memory_resource upstream;
  limiting_adaptor limited(upstream, 1000);
  void* aligned = limited.allocate_async(1000, max_alignment, stream_ref{});
  EXPECT_EQ(limited.used_bytes(), 1000u);
  limited.deallocate_async(aligned, 1000, max_alignment, stream_ref{});
}

TEST(LimitingAdaptor, AnUpstreamRefusalGivesTheReservationBack) {
  host_memory_resource upstream(500);
  limiting_adaptor limited(upstream, 1000);
  EXPECT_THROW(static_cast<void>(limited.allocate_async(800, stream_ref{})), out_of_memory);
  EXPECT_EQ(limited.used_bytes(), 0u);
  void* fits = limited.allocate_async(500, stream_ref{});
  limited.deallocate_async(fits, 500, stream_ref{});
}

TEST(LimitingAdaptor, ConcurrentThreadsNeverPassTheCap) {
  host_memory_resource upstream;
  constexpr std::size_t cap = 10 * 4096;  // fewer than the threads: some must be refused
  limiting_adaptor limited(upstream, cap);
  std::atomic<std::size_t> over_cap{0};
  std::atomic<std::size_t> refusals{0};
  std::vector<std::thread> workers;
  for (int index = 0; index < 16; ++index) {
    workers.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        try {
          void* p = limited.allocate_async(4096, stream_ref{});
          if (upstream.used_bytes() > cap) ++over_cap;
          limited.deallocate_async(p, 4096, stream_ref{});
        } catch (const out_of_memory&) {
          ++refusals;
        }
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  EXPECT_EQ(over_cap.load(), 0u);
  EXPECT_EQ(limited.used_bytes(), 0u);
  RecordProperty("refusals", std::to_string(refusals.load()));
  EXPECT_EQ(upstream.used_bytes(), 0u);
}

TEST(LimitingAdaptor, CapsTheGpuKinds) {
  CUDAPMR_REQUIRE_GPU();
  const cudapmr::stream stream(0);
  gpu_upstreams upstreams;
  for (stream_ordered_resource* upstream : upstreams.all()) {
    limiting_adaptor limited(*upstream, 4 * mebibyte);
    void* all = limited.allocate_async(4 * mebibyte, stream);
    EXPECT_THROW(static_cast<void>(limited.allocate_async(1, stream)), out_of_memory) << upstream->description();
    limited.deallocate_async(all, 4 * mebibyte, stream);
    void* again = limited.allocate(4 * mebibyte);
    limited.deallocate(again, 4 * mebibyte);
    stream.synchronize();
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
}

// The shared contract, over the host resource and each kind's owned pool.
using limiting_adaptor_cases = adaptor_over_each_kind<limiting_maker>;
using limiting_adaptor_exhaustible_cases = adaptor_over_exhaustible_kinds<limiting_maker>;
CUDAPMR_INSTANTIATE_RESOURCE_CONTRACT(LimitingAdaptor, limiting_adaptor_cases, limiting_adaptor_exhaustible_cases);

}  // namespace
}  // namespace cudapmr::test
