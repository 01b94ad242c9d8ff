// SPDX-License-Identifier: Apache-2.0
// What nccl_memory_resource adds to the shared contract (which runs over it
// too), and NCCL's errors. Built where NCCL is found.
#include "support/resource_contract.hpp"
#include "support/resource_cases.hpp"

#include <cudapmr/nccl/error.hpp>
#include <cudapmr/nccl/memory_resource.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace cudapmr::test {
namespace {

TEST(NcclError, NamesTheCallNcclsAnswerAndTheCaller) {
  try {
    check_nccl(ncclInvalidArgument, "ncclAllReduce");
    ADD_FAILURE() << "no exception";
  } catch (const nccl_error& error) {
    EXPECT_EQ(error.result(), ncclInvalidArgument);
    EXPECT_STREQ(error.code().category().name(), "nccl");
    const std::string message = error.what();
    EXPECT_NE(message.find("ncclAllReduce"), std::string::npos) << message;
    EXPECT_NE(message.find(ncclGetErrorString(ncclInvalidArgument)), std::string::npos) << message;
    EXPECT_NE(message.find("nccl_memory_resource_test.cpp"), std::string::npos) << message;
  }
  EXPECT_NO_THROW(check_nccl(ncclSuccess, "ncclAllReduce"));
}

TEST(NcclMemoryResource, DescribesItsDevice) {
  CUDAPMR_REQUIRE_GPU();
  const nccl_memory_resource resource(0);
  EXPECT_EQ(resource.description(), "nccl_memory_resource (device 0)");
  EXPECT_EQ(resource.kind(), memory_kind::device);
  EXPECT_EQ(resource.device_id(), 0);
}

TEST(NcclMemoryResource, RefusesADeviceThatDoesNotExist) {
  CUDAPMR_REQUIRE_GPU();
  EXPECT_THROW(nccl_memory_resource resource(device::count()), std::invalid_argument);
  EXPECT_THROW(nccl_memory_resource resource(-1), std::invalid_argument);
}

TEST(NcclMemoryResource, ResourcesOfOneDeviceAreEqualAndFreeEachOthersMemory) {
  CUDAPMR_REQUIRE_GPU();
  nccl_memory_resource first(0);
  nccl_memory_resource second(0);
  EXPECT_TRUE(first.is_equal(second));
  void* p = first.allocate(mebibyte);
  second.deallocate(p, mebibyte);
  EXPECT_FALSE(first.is_equal(default_device_resource(0)));
}

TEST(NcclMemoryResource, DeallocationWaitsForWorkQueuedOnItsStream) {
  CUDAPMR_REQUIRE_GPU();
  nccl_memory_resource resource(0);
  const cudapmr::stream stream(0);
  constexpr std::size_t count = 64 * mebibyte;  // long enough to outlast the call that frees it
  auto* words = static_cast<std::uint32_t*>(resource.allocate_async(count * sizeof(std::uint32_t), stream));
  write_sequence(words, count, 5, stream);
  resource.deallocate_async(words, count * sizeof(std::uint32_t), stream);
  // Had the memory been unmapped under the running kernel, the stream would report a fault.
  EXPECT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(NcclMemoryResource, AllocatesOnItsDeviceWhateverIsCurrent) {
  CUDAPMR_REQUIRE_GPUS(2);
  const detail::scoped_device current(0);
  nccl_memory_resource resource(1);
  void* p = resource.allocate(mebibyte);
  cudaPointerAttributes attributes{};
  CUDAPMR_CHECK(cudaPointerGetAttributes(&attributes, p));
  EXPECT_EQ(attributes.device, 1);
  resource.deallocate(p, mebibyte);
  int now = -1;
  CUDAPMR_CHECK(cudaGetDevice(&now));
  EXPECT_EQ(now, 0);
}

TEST(NcclMemoryResource, PeerDevicesReachItsMemory) {
  CUDAPMR_REQUIRE_GPUS(2);
  int reachable = 0;
  CUDAPMR_CHECK(cudaDeviceCanAccessPeer(&reachable, 1, 0));
  if (reachable == 0) GTEST_SKIP() << "device 1 cannot reach device 0 on this machine";
  nccl_memory_resource resource(0);
  constexpr std::size_t count = 1 << 20;
  auto* words = static_cast<std::uint32_t*>(resource.allocate(count * sizeof(std::uint32_t)));
  {
    const detail::scoped_device on_1(1);
    const cudapmr::stream stream_1(1);
    write_sequence(words, count, 41, stream_1);  // device 1 writes device 0's NCCL memory directly
    stream_1.synchronize();
  }
  const detail::scoped_device on_0(0);
  const cudapmr::stream stream_0(0);
  EXPECT_EQ(count_sequence_mismatches(words, count, 41, stream_0), 0u);
  resource.deallocate(words, count * sizeof(std::uint32_t));
}

// The shared contract, over NCCL's allocator.
using nccl_cases = ::testing::Types<nccl_case>;
CUDAPMR_INSTANTIATE_RESOURCE_CONTRACT(Nccl, nccl_cases, nccl_cases);

}  // namespace
}  // namespace cudapmr::test
