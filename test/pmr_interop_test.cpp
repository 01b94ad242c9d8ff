// SPDX-License-Identifier: Apache-2.0
// cudapmr resources under standard std::pmr code.
#include "support/resource_cases.hpp"

#include <gtest/gtest.h>

#include <memory_resource>
#include <numeric>
#include <span>
#include <thread>
#include <vector>

namespace cudapmr::test {
namespace {

/// The host-accessible kinds: std::pmr containers and pool resources write
/// their own bookkeeping into the memory, so they need the host to reach it.
using host_accessible_cases =
    ::testing::Types<host_case, pinned_default_case, pinned_owned_case, managed_default_case, managed_owned_case>;

template <class Case>
class PmrInterop : public resource_fixture<Case> {};
TYPED_TEST_SUITE(PmrInterop, host_accessible_cases);

TYPED_TEST(PmrInterop, PmrVectorWorksOnTheHost) {
  std::pmr::vector<std::uint64_t> values(&this->resource());
  for (std::uint64_t i = 0; i < 100000; ++i) values.push_back(i * i);  // grows through many reallocations
  for (std::uint64_t i = 0; i < values.size(); i += 997) ASSERT_EQ(values[i], i * i);
  values.clear();
  values.shrink_to_fit();
}

TYPED_TEST(PmrInterop, PmrVectorDataWorksInAKernel) {
  if (!this->resource().is_device_accessible()) GTEST_SKIP() << "pageable memory is not device-accessible";
  std::pmr::vector<std::uint32_t> values(1 << 20, &this->resource());
  std::iota(values.begin(), values.end(), 1000u);  // host writes
  mark_initialized(std::span(values), this->test_stream());  // which initcheck does not see in pooled memory
  add_to_each(values.data(), values.size(), 5, this->test_stream());  // kernel reads and writes
  this->synchronize();
  for (std::size_t i = 0; i < values.size(); i += 1009) ASSERT_EQ(values[i], 1005u + i) << i;
  EXPECT_EQ(count_sequence_mismatches(values.data(), values.size(), 1005, this->test_stream()), 0u);
}

TYPED_TEST(PmrInterop, SynchronizedPoolResourceLayersOverIt) {
  std::pmr::synchronized_pool_resource pool(&this->resource());
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int index = 0; index < 4; ++index) {
    threads.emplace_back([&, index] {
      std::pmr::vector<std::pmr::vector<int>> nested(&pool);
      for (int i = 0; i < 200; ++i) nested.emplace_back(static_cast<std::size_t>(i + 1), index);
      for (const auto& inner : nested)
        for (const int value : inner) wrong += value != index;
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  pool.release();
}

TYPED_TEST(PmrInterop, UnsynchronizedPoolAndMonotonicBufferLayerOverIt) {
  std::pmr::unsynchronized_pool_resource pool(&this->resource());
  std::pmr::monotonic_buffer_resource arena(64 * 1024, &pool);
  std::pmr::vector<double> values(&arena);
  values.assign(50000, 1.5);
  EXPECT_EQ(std::accumulate(values.begin(), values.end(), 0.0), 75000.0);
}

TYPED_TEST(PmrInterop, PolymorphicAllocatorComparesByResourceEquality) {
  const std::pmr::polymorphic_allocator<int> first(&this->resource());
  const std::pmr::polymorphic_allocator<int> second(&this->resource());
  EXPECT_TRUE(first == second);
  host_memory_resource other;
  EXPECT_FALSE(first == std::pmr::polymorphic_allocator<int>(&other));
}

}  // namespace
}  // namespace cudapmr::test
