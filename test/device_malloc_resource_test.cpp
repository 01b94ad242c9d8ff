// SPDX-License-Identifier: Apache-2.0
// device_malloc_resource keeps the shared contract, gives memory back at
// once, and never lets cudaMalloc or cudaFree break a stream capture.
#include "support/resource_contract.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace cudapmr::test {
namespace {

/// Whether `p` is still memory CUDA knows. (Not cudaMemGetInfo: other
/// processes, such as the sanitizers' parallel shards, share the device.)
bool is_allocated(const void* p) {
  cudaPointerAttributes attributes{};
  const bool known = cudaPointerGetAttributes(&attributes, p) == cudaSuccess;
  static_cast<void>(cudaGetLastError());
  return known && attributes.type == cudaMemoryTypeDevice;
}

/// Ends the capture on `stream`, which must still be valid, and drops its graph.
void end_capture(const cudapmr::stream& stream) {
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream.get(), &graph), cudaSuccess) << "the capture was broken";
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
}

class DeviceMallocResource : public ::testing::Test {
 protected:
  void SetUp() override { CUDAPMR_REQUIRE_GPU(); }
};

TEST_F(DeviceMallocResource, FreesGiveTheMemoryBackAtOnceOverAlignedOrNot) {
  device_malloc_resource resource(0);
  const cudapmr::stream stream(0);
  constexpr std::size_t bytes = 256 * mebibyte;
  for (const std::size_t alignment : {std::size_t{256}, std::size_t{4096}, std::size_t{1} << 16}) {
    for (int round = 0; round < 8; ++round) {
      void* p = resource.allocate_async(bytes, alignment, stream);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % alignment, 0u);
      EXPECT_EQ(resource.allocated_bytes(), bytes + alignment - 256) << "the padding counts";
      resource.deallocate_async(p, bytes, alignment, stream);
      EXPECT_FALSE(is_allocated(p)) << "alignment " << alignment << ": the free did not reach cudaFree";
    }
  }
  EXPECT_EQ(resource.allocated_bytes(), 0u);
  EXPECT_EQ(resource.allocated_bytes_high(), bytes + (std::size_t{1} << 16) - 256);
}

TEST_F(DeviceMallocResource, OverAlignedSmallBlocksFreeTheirOwnAllocationOnly) {
  // cudaMalloc packs small blocks into shared pages, so an aligned pointer
  // often differs from its allocation's; freeing the wrong base would free a neighbour.
  device_malloc_resource resource(0);
  const cudapmr::stream stream(0);
  constexpr std::size_t alignment = 4096;
  std::vector<void*> blocks;
  for (int i = 0; i < 64; ++i) blocks.push_back(resource.allocate_async(1000, alignment, stream));
  void* neighbour = resource.allocate_async(1000, stream);
  const std::size_t padded = 1000 + alignment - 256;
  EXPECT_EQ(resource.allocated_bytes(), 64 * padded + 1000) << "padding counts: the device holds it";
  for (void* p : blocks) {
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % alignment, 0u);
    resource.deallocate_async(p, 1000, alignment, stream);
    EXPECT_FALSE(is_allocated(p));
    EXPECT_TRUE(is_allocated(neighbour)) << "freeing an over-aligned block freed another allocation";
  }
  resource.deallocate_async(neighbour, 1000, stream);
  EXPECT_EQ(resource.allocated_bytes(), 0u);
}

TEST_F(DeviceMallocResource, EqualOnlyToItself) {
  device_malloc_resource first(0);
  device_malloc_resource second(0);
  EXPECT_TRUE(first.is_equal(first));
  EXPECT_FALSE(first.is_equal(second)) << "its over-aligned bases and counters are its own";
  device_memory_resource pool(0);
  EXPECT_FALSE(first.is_equal(pool));
}

TEST_F(DeviceMallocResource, AllocatesAndFreesWhileAnotherThreadCapturesInGlobalMode) {
  device_malloc_resource resource(0);
  const cudapmr::stream captured(0);
  const cudapmr::stream stream(0);
  ASSERT_EQ(cudaStreamBeginCapture(captured.get(), cudaStreamCaptureModeGlobal), cudaSuccess);
  std::thread other([&] {
    void* p = resource.allocate_async(mebibyte, stream);  // cudaMalloc, refused in global mode unless relaxed
    EXPECT_TRUE(is_allocated(p));
    resource.deallocate_async(p, mebibyte, stream);  // cudaFree, likewise
    EXPECT_FALSE(is_allocated(p));
  });
  other.join();
  ASSERT_NO_FATAL_FAILURE(end_capture(captured));
}

TEST_F(DeviceMallocResource, OnACapturedStreamAnAllocationBecomesAGraphAllocationNode) {
  device_malloc_resource resource(0);
  const cudapmr::stream stream(0);
  ASSERT_EQ(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal), cudaSuccess);
  void* p = resource.allocate_async(mebibyte, stream);  // cudaMalloc would be refused, and break the capture
  resource.deallocate_async(p, mebibyte, stream);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream.get(), &graph), cudaSuccess) << "the capture was broken";
  const graph_memory_nodes nodes = count_memory_nodes(graph);
  EXPECT_EQ(nodes.allocations, 1);
  EXPECT_EQ(nodes.frees, 1);
  EXPECT_EQ(resource.allocated_bytes(), 0u) << "the graph's memory is the driver's, not this resource's";
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
}

TEST_F(DeviceMallocResource, AFreeOnACapturedStreamWaitsForRelease) {
  device_malloc_resource resource(0);
  const cudapmr::stream stream(0);
  void* p = resource.allocate_async(mebibyte, stream);
  ASSERT_EQ(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeRelaxed), cudaSuccess);
  resource.deallocate_async(p, mebibyte, stream);
  ASSERT_NO_FATAL_FAILURE(end_capture(stream));
  EXPECT_TRUE(is_allocated(p)) << "freed while a replay of the graph could still use it";
  EXPECT_EQ(resource.allocated_bytes(), 0u);
  resource.release();
  EXPECT_FALSE(is_allocated(p));
}

TEST_F(DeviceMallocResource, UnderACacheACapturedAllocationIsAGraphNodeNotACachedBlock) {
  device_malloc_resource leaf(0);
  caching_resource cache(leaf);
  const cudapmr::stream stream(0);
  cache.deallocate_async(cache.allocate_async(mebibyte, stream), mebibyte, stream);  // one block cached
  ASSERT_EQ(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeRelaxed), cudaSuccess);
  void* p = cache.allocate_async(mebibyte, stream);
  cache.deallocate_async(p, mebibyte, stream);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream.get(), &graph), cudaSuccess) << "the capture was broken";
  EXPECT_EQ(count_memory_nodes(graph).allocations, 1);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cache.statistics().hits, 0u);
  EXPECT_EQ(cache.statistics().upstream_reserved, mebibyte) << "the leaf's allocated bytes, as the cache sees them";
}

TEST_F(DeviceMallocResource, RefusesADeviceThatDoesNotExist) {
  EXPECT_THROW(device_malloc_resource(-1), std::invalid_argument);
  EXPECT_THROW(device_malloc_resource(device::count()), std::invalid_argument);
}

}  // namespace

using device_malloc_cases = ::testing::Types<device_malloc_case>;
CUDAPMR_INSTANTIATE_RESOURCE_CONTRACT(DeviceMalloc, device_malloc_cases, device_malloc_cases);

}  // namespace cudapmr::test
