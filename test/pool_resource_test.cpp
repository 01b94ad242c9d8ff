// SPDX-License-Identifier: Apache-2.0
// What the three pool-backed kinds add to the shared contract: options,
// statistics, trimming, pool sharing, the per-device default, and the cached
// pinned and managed defaults over the leaves.
#include "support/resource_cases.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory_resource>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace cudapmr::test {
namespace {

class PoolResource : public ::testing::Test {
 protected:
  void SetUp() override { CUDAPMR_REQUIRE_GPU(); }
};

TEST_F(PoolResource, StatsTrackUsedAndReservedMemory) {
  device_memory_resource resource(0, device_pool_options{});
  const cudapmr::stream stream(0);
  EXPECT_EQ(resource.stats().used_current, 0u);
  void* p = resource.allocate_async(8 * mebibyte, stream);
  const pool_stats during = resource.stats();
  EXPECT_GE(during.used_current, 8 * mebibyte);
  EXPECT_GE(during.reserved_current, during.used_current);
  resource.deallocate_async(p, 8 * mebibyte, stream);
  stream.synchronize();
  const pool_stats after = resource.stats();
  EXPECT_EQ(after.used_current, 0u);
  EXPECT_GE(after.used_high, 8 * mebibyte);
  EXPECT_GE(after.reserved_current, 8 * mebibyte) << "the default release threshold keeps all memory";
  resource.reset_peaks();
  EXPECT_EQ(resource.stats().used_high, 0u);
}

TEST_F(PoolResource, ReleaseThresholdDefaultsToKeepingAllMemory) {
  EXPECT_EQ(device_memory_resource(0, device_pool_options{}).release_threshold(), keep_all_memory);
  EXPECT_EQ(pinned_memory_resource(pinned_pool_options{}).release_threshold(), keep_all_memory);
  EXPECT_EQ(managed_memory_resource(managed_pool_options{}).release_threshold(), keep_all_memory);
  device_memory_resource resource(0, device_pool_options{.release_threshold = 4 * mebibyte});
  EXPECT_EQ(resource.release_threshold(), 4 * mebibyte);
}

TEST_F(PoolResource, InitialSizeIsReservedUpFront) {
  const device_memory_resource device_memory(0, device_pool_options{.initial_size = 64 * mebibyte});
  EXPECT_GE(device_memory.stats().reserved_current, 64 * mebibyte);
  EXPECT_EQ(device_memory.stats().used_current, 0u);
  const pinned_memory_resource pinned(pinned_pool_options{.initial_size = 16 * mebibyte});
  EXPECT_GE(pinned.stats().reserved_current, 16 * mebibyte);
  const managed_memory_resource managed(managed_pool_options{.initial_size = 16 * mebibyte});
  EXPECT_GE(managed.stats().reserved_current, 16 * mebibyte);
}

TEST_F(PoolResource, TrimToReturnsUnusedMemoryToTheSystem) {
  pinned_memory_resource resource(pinned_pool_options{.initial_size = 64 * mebibyte});
  ASSERT_GE(resource.stats().reserved_current, 64 * mebibyte);
  resource.trim_to(0);
  EXPECT_EQ(resource.stats().reserved_current, 0u);
}

// With CUDA 13.0 (driver 580.159), a managed pool with no preferred location
// that released pages handed the same addresses out again with contents the
// host did not see: 61,440 of 65,536 bytes read 0, and a prefetch to the host
// lost the device's writes for the copy engine too. Such pools keep their pages.
TEST_F(PoolResource, ManagedMemoryTakenAgainAfterATrimReadsWhatTheDeviceWrote) {
  managed_memory_resource default_pool;
  managed_memory_resource owned(managed_pool_options{});
  managed_memory_resource preferring(managed_pool_options{.preferred_device = 0});
  EXPECT_FALSE(default_pool.gives_memory_back());
  EXPECT_FALSE(owned.gives_memory_back());
  EXPECT_TRUE(preferring.gives_memory_back());
  const cudapmr::stream stream(0);
  constexpr std::size_t bytes = 64 << 10;
  for (managed_memory_resource* managed : {&default_pool, &owned, &preferring}) {
    for (const bool prefetch : {false, true}) {
      SCOPED_TRACE(managed->description() + (prefetch ? ", prefetched to the host" : ", read where it is"));
      void* old = managed->allocate_async(bytes, stream);
      ASSERT_EQ(cudaMemsetAsync(old, 9, bytes, stream.get()), cudaSuccess);
      managed->deallocate_async(old, bytes, stream);
      managed->trim(stream);
      if (!managed->gives_memory_back()) {
        EXPECT_GE(managed->stats().reserved_current, bytes) << "a pool that keeps its pages released some";
      }
      void* kept = managed->allocate_async(4096, stream);  // the next block starts inside the old one
      auto* taken = static_cast<unsigned char*>(managed->allocate_async(bytes, stream));
      ASSERT_EQ(cudaMemsetAsync(taken, 2, bytes, stream.get()), cudaSuccess);
      if (prefetch) managed->prefetch_to_host(taken, bytes, stream);
      stream.synchronize();
      const auto old_start = reinterpret_cast<std::uintptr_t>(old);
      const auto new_start = reinterpret_cast<std::uintptr_t>(taken);
      const bool reused = new_start < old_start + bytes && old_start < new_start + bytes;
      EXPECT_EQ(static_cast<std::size_t>(std::count(taken, taken + bytes, 2)), bytes)
          << "the block " << (reused ? "reuses" : "does not reuse") << " the trimmed block's addresses";
      managed->deallocate_async(taken, bytes, stream);
      managed->deallocate_async(kept, 4096, stream);
      stream.synchronize();
    }
  }
}

TEST_F(PoolResource, ManagedPoolsThatKeepTheirPagesRefuseAReleaseThreshold) {
  managed_memory_resource default_pool;
  try {
    default_pool.set_release_threshold(0);
    ADD_FAILURE() << "a release threshold of 0 accepted on the default managed pool";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("release threshold of 0 bytes"), std::string::npos) << error.what();
  }
  EXPECT_EQ(default_pool.release_threshold(), keep_all_memory);
  EXPECT_EQ(default_pool.state().releasable_bytes, std::optional<std::size_t>(0));
  managed_memory_resource preferring(managed_pool_options{.release_threshold = 0, .preferred_device = 0});
  EXPECT_EQ(preferring.release_threshold(), 0u);
}

TEST_F(PoolResource, MaxSizeCapsDeviceAndPinnedPools) {
  device_memory_resource device_memory(0, device_pool_options{.max_size = 64 * mebibyte});
  pinned_memory_resource pinned(pinned_pool_options{.max_size = 64 * mebibyte});
  for (pool_resource* resource : {static_cast<pool_resource*>(&device_memory), static_cast<pool_resource*>(&pinned)}) {
    void* half = resource->allocate(32 * mebibyte);
    EXPECT_THROW(static_cast<void>(resource->allocate(48 * mebibyte)), out_of_memory) << resource->description();
    void* rest = resource->allocate(16 * mebibyte);
    resource->deallocate(rest, 16 * mebibyte);
    resource->deallocate(half, 32 * mebibyte);
  }
}

TEST_F(PoolResource, ResourcesOverTheSamePoolCompareEqual) {
  const device_memory_resource first(0);
  const device_memory_resource second(0);
  EXPECT_TRUE(first.is_equal(second));
  EXPECT_EQ(first.pool(), second.pool());
  EXPECT_FALSE(first.owns_pool());
  const device_memory_resource owned(0, device_pool_options{});
  EXPECT_TRUE(owned.owns_pool());
  EXPECT_FALSE(first.is_equal(owned));
  EXPECT_TRUE(pinned_memory_resource().is_equal(pinned_memory_resource()));
  EXPECT_TRUE(managed_memory_resource().is_equal(managed_memory_resource()));
  EXPECT_FALSE(pinned_memory_resource().is_equal(managed_memory_resource()));
}

TEST_F(PoolResource, PmrDeallocateReturnsMemoryToThePool) {
  device_memory_resource owner(0, device_pool_options{});
  const pool_stats before = owner.stats();
  void* p = owner.allocate(mebibyte);
  ASSERT_EQ(owner.stats().used_current, before.used_current + mebibyte);
  owner.deallocate(p, mebibyte);
  owner.bound_stream().wait();
  EXPECT_EQ(owner.stats().used_current, before.used_current);
}

TEST_F(PoolResource, HostAccessibleKindsAreLeavesWithNoCacheOfTheirOwn) {
  // One cache implementation serves every kind: a pmr free of pinned or
  // managed memory goes back to the pool, in order on the bound stream.
  pinned_memory_resource pinned(pinned_pool_options{});
  managed_memory_resource managed(managed_pool_options{});
  for (pool_resource* leaf : {static_cast<pool_resource*>(&pinned), static_cast<pool_resource*>(&managed)}) {
    for (const std::size_t bytes : {std::size_t{256}, mebibyte}) {
      void* p = leaf->allocate(bytes);
      EXPECT_GE(leaf->stats().used_current, bytes) << leaf->description();
      leaf->deallocate(p, bytes);
      leaf->bound_stream().wait();
      EXPECT_EQ(leaf->stats().used_current, 0u) << leaf->description() << ": " << bytes << " bytes stayed";
    }
  }
}

TEST_F(PoolResource, DefaultPinnedAndManagedResourcesCacheOverTheDefaultPools) {
  for (caching_resource* cache : {&default_pinned_resource(), &default_managed_resource()}) {
    const auto* leaf = dynamic_cast<const pool_resource*>(&cache->upstream_resource());
    ASSERT_NE(leaf, nullptr) << cache->description();
    EXPECT_FALSE(leaf->owns_pool()) << leaf->description();
    EXPECT_TRUE(cache->is_host_accessible() && cache->is_device_accessible()) << cache->description();
    const std::uint64_t hits_before = cache->statistics().hits;
    for (int round = 0; round < 3; ++round) {
      std::pmr::vector<int> values(1000, round, cache);  // the pmr path std containers take
      EXPECT_EQ(values[999], round);
    }
    EXPECT_GE(cache->statistics().hits, hits_before + 2) << cache->description() << ": a warm pmr pair went upstream";
  }
  EXPECT_EQ(&default_pinned_resource(), &default_pinned_resource());
  EXPECT_EQ(&default_managed_resource(), &default_managed_resource());
  EXPECT_EQ(default_pinned_resource().kind(), memory_kind::pinned);
  EXPECT_EQ(default_managed_resource().kind(), memory_kind::managed);
}

TEST_F(PoolResource, MemoryFreedThroughAnEqualResourceReturnsToThePool) {
  device_memory_resource allocator(0);
  device_memory_resource other(0);
  ASSERT_TRUE(allocator == other);
  const std::size_t used_before = allocator.stats().used_current;
  void* p = allocator.allocate(mebibyte);
  std::pmr::memory_resource& through = other;
  through.deallocate(p, mebibyte);
  other.bound_stream().wait();
  EXPECT_EQ(allocator.stats().used_current, used_before);
}

TEST_F(PoolResource, OverAlignedMemoryFreedThroughAnEqualResourceReturnsToThePool) {
  device_memory_resource allocator(0);
  device_memory_resource other(0);
  ASSERT_TRUE(allocator == other);
  const cudapmr::stream stream(0);
  stream.synchronize();
  const std::size_t used_before = allocator.stats().used_current;
  for (const std::size_t alignment : {std::size_t{4096}, std::size_t{1} << 16, max_alignment}) {
    void* p = allocator.allocate_async(mebibyte, alignment, stream);
    other.deallocate_async(p, mebibyte, alignment, stream);
  }
  stream.synchronize();
  EXPECT_EQ(allocator.stats().used_current, used_before) << "an over-aligned block leaked";
}

TEST_F(PoolResource, ABlockAllocatedBeforeACaptureAndFreedInItLeavesTheCaptureAndItsLaunchesIntact) {
  // CUDA documents that a free during a capture takes only the graph's own
  // allocations; with driver 580.159 on the H200 the pool leaf's cudaFreeAsync
  // of an older block kept the capture valid, and the graph launched again
  // and again with the block still allocated.
  device_memory_resource resource(0, device_pool_options{});
  const cudapmr::stream stream(0);
  void* before = resource.allocate_async(mebibyte, stream);
  stream.synchronize();
  ASSERT_EQ(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal), cudaSuccess);
  void* inside = resource.allocate_async(mebibyte, stream);
  EXPECT_EQ(cudaMemsetAsync(inside, 1, mebibyte, stream.get()), cudaSuccess);
  EXPECT_EQ(cudaMemsetAsync(before, 2, mebibyte, stream.get()), cudaSuccess);
  resource.deallocate_async(before, mebibyte, stream);
  resource.deallocate_async(inside, mebibyte, stream);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream.get(), &graph), cudaSuccess) << "a free broke the capture";
  cudaGraphExec_t launchable = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&launchable, graph, 0), cudaSuccess);
  for (int launch = 0; launch < 3; ++launch) EXPECT_EQ(cudaGraphLaunch(launchable, stream.get()), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
  EXPECT_EQ(cudaGraphExecDestroy(launchable), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_GE(resource.stats().used_current, mebibyte) << "the block the graph writes went back to the pool";
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(PoolResource, DefaultDeviceResourceIsOnePerDevice) {
  device_memory_resource& first = default_device_resource(0);
  device_memory_resource& again = default_device_resource(0);
  EXPECT_EQ(&first, &again);
  EXPECT_EQ(first.device_id(), 0);
  EXPECT_FALSE(first.owns_pool());
  EXPECT_TRUE(first.is_equal(device_memory_resource(0)));
}

TEST_F(PoolResource, DeviceOrdinalOutOfRangeThrowsNamingTheCount) {
  const int count = device::count();
  try {
    device_memory_resource resource(count);
    ADD_FAILURE() << "device " << count << " was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find(std::to_string(count) + " CUDA device"), std::string::npos)
        << error.what();
  }
  EXPECT_THROW(static_cast<void>(default_device_resource(count)), std::invalid_argument);
  EXPECT_THROW(managed_memory_resource(managed_pool_options{.preferred_device = count}), std::invalid_argument);
}

TEST_F(PoolResource, PinnedMemoryIsReadAndWrittenByKernels) {
  pinned_memory_resource resource;
  const cudapmr::stream stream(0);
  constexpr std::size_t count = 1 << 20;
  auto* words = static_cast<std::uint32_t*>(resource.allocate_async(count * sizeof(std::uint32_t), stream));
  write_sequence(words, count, 5, stream);  // kernel writes
  stream.synchronize();
  for (std::size_t i = 0; i < count; i += 4099) ASSERT_EQ(words[i], 5 + i) << i;  // host reads
  for (std::size_t i = 0; i < count; ++i) words[i] = static_cast<std::uint32_t>(7 + i);  // host writes
  EXPECT_EQ(count_sequence_mismatches(words, count, 7, stream), 0u);  // kernel reads
  resource.deallocate_async(words, count * sizeof(std::uint32_t), stream);
  stream.synchronize();
}

TEST_F(PoolResource, BufferDestructorReturnsMemoryToThePool) {
  device_memory_resource device_memory(0, device_pool_options{});
  pinned_memory_resource pinned(pinned_pool_options{});
  managed_memory_resource managed(managed_pool_options{});
  const cudapmr::stream stream(0);
  for (pool_resource* pool : {static_cast<pool_resource*>(&device_memory), static_cast<pool_resource*>(&pinned),
                              static_cast<pool_resource*>(&managed)}) {
    {
      const buffer<char> values(*pool, 3 * mebibyte, stream);
      EXPECT_GE(pool->stats().used_current, 3 * mebibyte) << pool->description();
    }
    stream.synchronize();
    EXPECT_EQ(pool->stats().used_current, 0u) << pool->description();
  }
}

TEST_F(PoolResource, ManagedPreferredDeviceIsItsDeviceId) {
  EXPECT_EQ(managed_memory_resource(managed_pool_options{.preferred_device = 0}).device_id(), 0);
  EXPECT_EQ(managed_memory_resource().device_id(), -1);
}

TEST_F(PoolResource, DescriptionNamesClassDeviceAndPool) {
  EXPECT_EQ(device_memory_resource(0).description(), "device_memory_resource (device 0, default pool)");
  EXPECT_EQ(pinned_memory_resource(pinned_pool_options{.numa_node = any_numa_node}).description(),
            "pinned_memory_resource (owned pool)");
  // A pool on a node names it.
  const pinned_memory_resource near(pinned_pool_options{});
  if (near.numa_node()) {
    EXPECT_EQ(near.description(),
              "pinned_memory_resource (NUMA node " + std::to_string(*near.numa_node()) + ", owned pool)");
  }
}

}  // namespace
}  // namespace cudapmr::test
