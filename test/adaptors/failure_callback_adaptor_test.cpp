// SPDX-License-Identifier: Apache-2.0
// failure_callback_adaptor: the callback is asked on exhaustion, may free and
// retry, and the refusal goes through once it declines.
#include "support/resource_contract.hpp"
#include "support/resource_cases.hpp"

#include <cudapmr/adaptors/failure_callback_adaptor.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace cudapmr::test {
namespace {

TEST(FailureCallbackAdaptor, IsNotCalledWhileAllocationsSucceed) {
  host_memory_resource upstream;
  int calls = 0;
  failure_callback_adaptor adaptor(upstream, [&](const allocation_failure&) {
    ++calls;
    return false;
  });
  adaptor.deallocate(adaptor.allocate(4096), 4096);
  EXPECT_EQ(calls, 0);
}

TEST(FailureCallbackAdaptor, RetriesAfterTheCallbackFreesMemory) {
  host_memory_resource upstream(1000);
  void* spare = upstream.allocate_async(600, stream_ref{});  // memory the callback can give back
  std::vector<allocation_failure> seen;
  failure_callback_adaptor adaptor(upstream, [&](const allocation_failure& failure) {
    seen.push_back(failure);
    if (spare == nullptr) return false;
    upstream.deallocate_async(spare, 600, stream_ref{});
    spare = nullptr;
    return true;
  });
  void* p = adaptor.allocate_async(800, 512, stream_ref{});
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].bytes, 800u);
  EXPECT_EQ(seen[0].alignment, 512u);
  EXPECT_EQ(seen[0].attempt, 1u);
  adaptor.deallocate_async(p, 800, 512, stream_ref{});
}

TEST(FailureCallbackAdaptor, LetsTheRefusalThroughOnceTheCallbackDeclines) {
  host_memory_resource upstream(1000);
  std::vector<std::size_t> attempts;
  failure_callback_adaptor adaptor(upstream, [&](const allocation_failure& failure) {
    attempts.push_back(failure.attempt);
    EXPECT_EQ(failure.error.requested_bytes(), 2000u);
    return failure.attempt < 3;
  });
  try {
    static_cast<void>(adaptor.allocate_async(2000, stream_ref{}));
    ADD_FAILURE() << "2000 bytes from a 1000-byte resource";
  } catch (const out_of_memory& error) {
    EXPECT_NE(std::string(error.what()).find(upstream.description()), std::string::npos) << error.what();
  }
  EXPECT_EQ(attempts, (std::vector<std::size_t>{1, 2, 3}));
  EXPECT_THROW(static_cast<void>(adaptor.allocate(2000)), std::bad_alloc);  // the pmr path too
}

TEST(FailureCallbackAdaptor, ExceptionsFromTheCallbackPropagate) {
  host_memory_resource upstream(10);
  failure_callback_adaptor adaptor(upstream, [](const allocation_failure&) -> bool {
    throw std::runtime_error("spill failed");
  });
  EXPECT_THROW(static_cast<void>(adaptor.allocate_async(100, stream_ref{})), std::runtime_error);
}

TEST(FailureCallbackAdaptor, AnEmptyCallbackIsRefused) {
  host_memory_resource upstream;
  EXPECT_THROW(failure_callback_adaptor(upstream, failure_callback{}), std::invalid_argument);
}

TEST(FailureCallbackAdaptor, ThreadsWaitingForMemoryAllSucceed) {
  // 8 threads share room for 4 allocations; the callback yields until another frees.
  host_memory_resource upstream(4 * 1024);
  failure_callback_adaptor adaptor(upstream, [](const allocation_failure&) {
    std::this_thread::yield();
    return true;
  });
  std::atomic<int> done{0};
  std::vector<std::thread> workers;
  for (int index = 0; index < 8; ++index) {
    workers.emplace_back([&] {
      for (int i = 0; i < 200; ++i) adaptor.deallocate_async(adaptor.allocate_async(1024, stream_ref{}), 1024, stream_ref{});
      ++done;
    });
  }
  for (std::thread& worker : workers) worker.join();
  EXPECT_EQ(done.load(), 8);
  EXPECT_EQ(upstream.used_bytes(), 0u);
}

TEST(FailureCallbackAdaptor, TrimsAGpuPoolAndRetries) {
  CUDAPMR_REQUIRE_GPU();
  const cudapmr::stream stream(0);
  device_memory_resource pool(0, device_pool_options{.max_size = 64 * mebibyte});
  void* hog = pool.allocate_async(48 * mebibyte, stream);
  int calls = 0;
  failure_callback_adaptor adaptor(pool, [&](const allocation_failure& failure) {
    ++calls;
    if (hog == nullptr) return false;
    pool.deallocate_async(hog, 48 * mebibyte, failure.stream);
    hog = nullptr;
    return true;
  });
  void* p = adaptor.allocate_async(32 * mebibyte, stream);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  adaptor.deallocate_async(p, 32 * mebibyte, stream);
  stream.synchronize();
}

// The shared contract, over the host resource and each kind's owned pool.
using failure_callback_adaptor_cases = adaptor_over_each_kind<failure_callback_maker>;
using failure_callback_adaptor_exhaustible_cases = adaptor_over_exhaustible_kinds<failure_callback_maker>;
CUDAPMR_INSTANTIATE_RESOURCE_CONTRACT(FailureCallbackAdaptor, failure_callback_adaptor_cases, failure_callback_adaptor_exhaustible_cases);

}  // namespace
}  // namespace cudapmr::test
