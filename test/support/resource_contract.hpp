// SPDX-License-Identifier: Apache-2.0
#pragma once
// The contract every stream_ordered_resource keeps, as type-parameterized
// suites: each resource's and adaptor's own test file instantiates them over
// its cases with CUDAPMR_INSTANTIATE_RESOURCE_CONTRACT, so a new resource
// brings its own file.

#include "support/resource_cases.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory_resource>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

namespace cudapmr::test {

template <class Case>
class ResourceContract : public resource_fixture<Case> {};
TYPED_TEST_SUITE_P(ResourceContract);

inline bool is_aligned(const void* p, std::size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

TYPED_TEST_P(ResourceContract, ReportsItsKindAndAccessibility) {
  stream_ordered_resource& resource = this->resource();
  switch (resource.kind()) {
    case memory_kind::device:
      EXPECT_TRUE(resource.is_device_accessible());
      EXPECT_FALSE(resource.is_host_accessible());
      EXPECT_EQ(resource.device_id(), 0);
      break;
    case memory_kind::pinned:
      EXPECT_TRUE(resource.is_device_accessible());
      EXPECT_TRUE(resource.is_host_accessible());
      EXPECT_EQ(resource.device_id(), -1);
      break;
    case memory_kind::managed:
      EXPECT_TRUE(resource.is_device_accessible());
      EXPECT_TRUE(resource.is_host_accessible());
      break;
    case memory_kind::pageable:
      EXPECT_FALSE(resource.is_device_accessible());
      EXPECT_TRUE(resource.is_host_accessible());
      EXPECT_EQ(resource.device_id(), -1);
      break;
  }
  EXPECT_FALSE(resource.description().empty());
}

TYPED_TEST_P(ResourceContract, AllocateAsyncIsAlignedTo256ByDefault) {
  for (const std::size_t bytes : {std::size_t{1}, std::size_t{3}, std::size_t{255}, std::size_t{4097}, mebibyte}) {
    void* p = this->resource().allocate_async(bytes, this->test_stream());
    EXPECT_TRUE(is_aligned(p, default_alignment)) << bytes << " bytes at " << p;
    this->expect_usable(p, bytes, this->test_stream());
    this->resource().deallocate_async(p, bytes, this->test_stream());
  }
  this->synchronize();
}

TYPED_TEST_P(ResourceContract, HonoursAlignmentsLargerThanThePoolGives) {
  for (std::size_t alignment = 512; alignment <= max_alignment; alignment *= 8) {
    void* p = this->resource().allocate_async(1000, alignment, this->test_stream());
    EXPECT_TRUE(is_aligned(p, alignment)) << "alignment " << alignment << " gave " << p;
    this->expect_usable(p, 1000, this->test_stream());
    this->resource().deallocate_async(p, 1000, alignment, this->test_stream());
  }
  void* p = this->resource().allocate(64, max_alignment);
  EXPECT_TRUE(is_aligned(p, max_alignment));
  this->resource().deallocate(p, 64, max_alignment);
  this->synchronize();
}

TYPED_TEST_P(ResourceContract, RefusesAlignmentThatIsNotAPowerOfTwo) {
  for (const std::size_t alignment : {std::size_t{0}, std::size_t{3}, std::size_t{1000}}) {
    try {
      static_cast<void>(this->resource().allocate_async(64, alignment, this->test_stream()));
      ADD_FAILURE() << "alignment " << alignment << " was accepted";
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find("alignment " + std::to_string(alignment)), std::string::npos)
          << error.what();
    }
    EXPECT_THROW(static_cast<void>(this->resource().allocate(64, alignment)), std::invalid_argument);
  }
}

TYPED_TEST_P(ResourceContract, RefusesAlignmentAboveTheMaximum) {
  const std::size_t alignment = std::size_t{1} << 40;
  try {
    static_cast<void>(this->resource().allocate_async(64, alignment, this->test_stream()));
    ADD_FAILURE() << "alignment 2^40 was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("1099511627776"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find(std::to_string(max_alignment)), std::string::npos) << error.what();
  }
}

TYPED_TEST_P(ResourceContract, ZeroBytesRoundTrip) {
  void* p = this->resource().allocate_async(0, this->test_stream());
  this->resource().deallocate_async(p, 0, this->test_stream());
  void* q = this->resource().allocate(0);
  this->resource().deallocate(q, 0);
  // Over-aligned too: no padding is ever allocated for nothing.
  void* aligned = this->resource().allocate_async(0, 4096, this->test_stream());
  EXPECT_EQ(aligned, nullptr);
  this->resource().deallocate_async(aligned, 0, 4096, this->test_stream());
  this->synchronize();
}

TYPED_TEST_P(ResourceContract, DeallocatingNullDoesNothing) {
  this->resource().deallocate_async(nullptr, 64, this->test_stream());
  SUCCEED();
}

TYPED_TEST_P(ResourceContract, PmrAllocateIsUsableAtOnceOnTheHost) {
  if (!this->resource().is_host_accessible()) GTEST_SKIP() << "memory of this kind is not host-accessible";
  constexpr std::size_t bytes = 4 * mebibyte;
  auto* p = static_cast<unsigned char*>(this->resource().allocate(bytes));
  std::fill(p, p + bytes, static_cast<unsigned char>(0x3c));
  EXPECT_EQ(std::count(p, p + bytes, static_cast<unsigned char>(0x3c)), static_cast<std::ptrdiff_t>(bytes));
  this->resource().deallocate(p, bytes);
}

TYPED_TEST_P(ResourceContract, PmrAllocateIsUsableAtOnceOnAnyStream) {
  if (!this->resource().is_device_accessible()) GTEST_SKIP() << "memory of this kind is not device-accessible";
  constexpr std::size_t count = 1 << 20;
  auto* words = static_cast<std::uint32_t*>(this->resource().allocate(count * sizeof(std::uint32_t)));
  const cudapmr::stream other(0);  // never seen by the resource
  write_sequence(words, count, 99, other);
  EXPECT_EQ(count_sequence_mismatches(words, count, 99, other), 0u);
  this->resource().deallocate(words, count * sizeof(std::uint32_t));
}

TYPED_TEST_P(ResourceContract, StreamOrderedMemoryIsUsableOnItsStream) {
  constexpr std::size_t bytes = 8 * mebibyte;
  void* p = this->resource().allocate_async(bytes, this->test_stream());
  this->expect_usable(p, bytes, this->test_stream());
  this->resource().deallocate_async(p, bytes, this->test_stream());
  this->synchronize();
}

TYPED_TEST_P(ResourceContract, EqualsItselfAndNotAnUnrelatedResource) {
  const stream_ordered_resource& resource = this->resource();
  EXPECT_TRUE(resource.is_equal(resource));
  host_memory_resource unrelated;
  EXPECT_FALSE(resource.is_equal(unrelated));
  EXPECT_FALSE(unrelated.is_equal(resource));
}

TYPED_TEST_P(ResourceContract, ConcurrentThreadsNeverReceiveOverlappingMemory) {
  constexpr int threads = 8;
  constexpr int iterations = 300;
  std::mutex live_mutex;
  std::set<std::pair<std::uintptr_t, std::uintptr_t>> live;  // [begin, end) of every live allocation
  std::atomic<int> overlaps{0};
  std::atomic<int> failures{0};

  auto worker = [&](int index) {
    try {
      std::optional<cudapmr::stream> own_stream;
      if (TypeParam::needs_gpu) own_stream.emplace(0);
      const stream_ref stream = own_stream ? own_stream->ref() : stream_ref{};
      std::mt19937_64 random(static_cast<std::uint64_t>(index));
      std::uniform_int_distribution<std::size_t> size(1, 256 * 1024);
      struct allocation {
        void* p;
        std::size_t bytes;
        bool synchronous;
      };
      std::vector<allocation> mine;
      auto release = [&](std::size_t position) {
        const allocation freed = mine[position];
        mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(position));
        const auto begin = reinterpret_cast<std::uintptr_t>(freed.p);
        {
          const std::lock_guard lock(live_mutex);
          live.erase({begin, begin + freed.bytes});
        }
        if (freed.synchronous) this->resource().deallocate(freed.p, freed.bytes);
        else this->resource().deallocate_async(freed.p, freed.bytes, stream);
      };
      for (int i = 0; i < iterations; ++i) {
        const std::size_t bytes = size(random);
        const bool synchronous = i % 2 == 0;
        void* p = synchronous ? this->resource().allocate(bytes) : this->resource().allocate_async(bytes, stream);
        const auto begin = reinterpret_cast<std::uintptr_t>(p);
        {
          const std::lock_guard lock(live_mutex);
          const auto next = live.lower_bound({begin, 0});
          if (next != live.end() && next->first < begin + bytes) ++overlaps;
          if (next != live.begin() && std::prev(next)->second > begin) ++overlaps;
          live.insert({begin, begin + bytes});
        }
        mine.push_back({p, bytes, synchronous});
        if (mine.size() > 8) release(random() % mine.size());
      }
      while (!mine.empty()) release(mine.size() - 1);
      if (own_stream) own_stream->synchronize();
    } catch (...) {
      ++failures;
    }
  };
  std::vector<std::thread> pool;
  for (int index = 0; index < threads; ++index) pool.emplace_back(worker, index);
  for (std::thread& thread : pool) thread.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(failures.load(), 0);
}

REGISTER_TYPED_TEST_SUITE_P(ResourceContract,
                            ReportsItsKindAndAccessibility,
                            AllocateAsyncIsAlignedTo256ByDefault,
                            HonoursAlignmentsLargerThanThePoolGives,
                            RefusesAlignmentThatIsNotAPowerOfTwo,
                            RefusesAlignmentAboveTheMaximum,
                            ZeroBytesRoundTrip,
                            DeallocatingNullDoesNothing,
                            PmrAllocateIsUsableAtOnceOnTheHost,
                            PmrAllocateIsUsableAtOnceOnAnyStream,
                            StreamOrderedMemoryIsUsableOnItsStream,
                            EqualsItselfAndNotAnUnrelatedResource,
                            ConcurrentThreadsNeverReceiveOverlappingMemory);

template <class Case>
class ResourceExhaustion : public resource_fixture<Case> {};
TYPED_TEST_SUITE_P(ResourceExhaustion);

TYPED_TEST_P(ResourceExhaustion, ThrowsOutOfMemoryAndKeepsWorking) {
  void* survivor = this->resource().allocate(mebibyte);
  this->expect_usable(survivor, mebibyte, this->test_stream());
  const std::size_t request = TypeParam::exhausting_request();
  try {
    static_cast<void>(this->resource().allocate_async(request, this->test_stream()));
    ADD_FAILURE() << request << " bytes were granted";
  } catch (const out_of_memory& error) {
    EXPECT_EQ(error.requested_bytes(), request);
    const std::string message = error.what();
    EXPECT_NE(message.find(std::to_string(request)), std::string::npos) << message;
    // An adaptor passes its upstream's refusal on; a limiting adaptor's own names the whole stack.
    EXPECT_NE(message.find(innermost_resource(this->resource()).description()), std::string::npos) << message;
  }
  EXPECT_THROW(static_cast<void>(this->resource().allocate(request)), std::bad_alloc);
  if (TypeParam::needs_gpu) {
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the failure left a sticky CUDA error";
  }

  void* after = this->resource().allocate_async(mebibyte, this->test_stream());
  this->expect_usable(after, mebibyte, this->test_stream());
  this->resource().deallocate_async(after, mebibyte, this->test_stream());
  this->synchronize();
  this->resource().deallocate(survivor, mebibyte);
}

REGISTER_TYPED_TEST_SUITE_P(ResourceExhaustion, ThrowsOutOfMemoryAndKeepsWorking);

}  // namespace cudapmr::test

/// Runs the contract over `Cases` and the exhaustion test over
/// `ExhaustibleCases` (managed memory is never exhausted: oversubscribing it
/// can stall the GPU); `Prefix` names the instantiation in test names.
#define CUDAPMR_INSTANTIATE_RESOURCE_CONTRACT(Prefix, Cases, ExhaustibleCases)        \
  INSTANTIATE_TYPED_TEST_SUITE_P(Prefix, ResourceContract, Cases);                   \
  INSTANTIATE_TYPED_TEST_SUITE_P(Prefix, ResourceExhaustion, ExhaustibleCases)
