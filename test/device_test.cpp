// SPDX-License-Identifier: Apache-2.0
// device.hpp and stream.hpp.
#include "support/gpu.hpp"

#include <cudapmr/device.hpp>
#include <cudapmr/error.hpp>
#include <cudapmr/stream.hpp>

#include <gtest/gtest.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace cudapmr {
namespace {

TEST(Device, CountIsNeverNegative) { EXPECT_GE(device::count(), 0); }

TEST(Device, OrdinalOutOfRangeThrowsNamingTheCount) {
  CUDAPMR_REQUIRE_GPU();
  const int count = device::count();
  for (const int ordinal : {count, count + 7, -1}) {
    try {
      static_cast<void>(device(ordinal));
      ADD_FAILURE() << "ordinal " << ordinal << " was accepted";
    } catch (const std::invalid_argument& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find(std::to_string(ordinal)), std::string::npos) << message;
      EXPECT_NE(message.find(std::to_string(count) + " CUDA device"), std::string::npos) << message;
    }
  }
}

TEST(Device, DescribesItself) {
  CUDAPMR_REQUIRE_GPU();
  const device gpu(0);
  EXPECT_EQ(gpu.ordinal(), 0);
  EXPECT_FALSE(gpu.name().empty());
  const auto [major, minor] = gpu.compute_capability();
  EXPECT_GE(major * 10 + minor, 75);
  EXPECT_GT(gpu.attribute(cudaDevAttrMultiProcessorCount), 0);
  EXPECT_GT(gpu.total_memory(), gpu.free_memory() / 2);
  const std::optional<std::size_t> free_bytes = device::free_memory_if_known(0);
  ASSERT_TRUE(free_bytes.has_value());
  EXPECT_LE(*free_bytes, gpu.total_memory());
  EXPECT_EQ(gpu, device(0));
}

TEST(Device, FreeMemoryIfKnownIsEmptyWhereThereIsNoSuchDevice) {
  EXPECT_EQ(device::free_memory_if_known(-1), std::nullopt);
  EXPECT_EQ(device::free_memory_if_known(device::count()), std::nullopt);
}

TEST(Device, SetCurrentMakesItCurrent) {
  CUDAPMR_REQUIRE_GPU();
  const device last(device::count() - 1);
  last.set_current();
  EXPECT_EQ(device::current(), last);
  device(0).set_current();
  EXPECT_EQ(device::current().ordinal(), 0);
}

TEST(Stream, IsCreatedOnTheNamedDeviceAndSynchronizes) {
  CUDAPMR_REQUIRE_GPU();
  const stream created(0);
  EXPECT_NE(created.get(), nullptr);
  EXPECT_EQ(created.device(), 0);
  const stream_ref ref = created;
  EXPECT_EQ(ref.get(), created.get());
  EXPECT_NO_THROW(created.synchronize());
  const stream on_current;
  EXPECT_EQ(on_current.device(), device::current().ordinal());
}

TEST(Stream, MovesLeaveTheSourceEmpty) {
  CUDAPMR_REQUIRE_GPU();
  stream first(0);
  const cudaStream_t handle = first.get();
  stream second(std::move(first));
  EXPECT_EQ(second.get(), handle);
  EXPECT_EQ(first.get(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state is the contract
  stream third(0);
  third = std::move(second);
  EXPECT_EQ(third.get(), handle);
  EXPECT_NO_THROW(third.synchronize());
}

TEST(Stream, OrdinalOutOfRangeThrows) {
  CUDAPMR_REQUIRE_GPU();
  EXPECT_THROW(stream(device::count()), std::invalid_argument);
}

TEST(ScopedDevice, RestoresTheCallersDevice) {
  CUDAPMR_REQUIRE_GPU();
  device(0).set_current();
  {
    const detail::scoped_device guard(device::count() - 1);
    EXPECT_EQ(device::current().ordinal(), device::count() - 1);
  }
  EXPECT_EQ(device::current().ordinal(), 0);
}

}  // namespace
}  // namespace cudapmr
