// SPDX-License-Identifier: Apache-2.0
// Several devices: resources and streams keep to their own device whatever is
// current, pools open to peer devices, buffers copy between devices. Tests
// that need two GPUs skip, visibly, with fewer.
#include "support/resource_cases.hpp"

#include <cudapmr/detail/peer_copy.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

namespace cudapmr::test {
namespace {

constexpr std::size_t word_count = 1 << 20;

int current_device() {
  int ordinal = -1;
  CUDAPMR_CHECK(cudaGetDevice(&ordinal));
  return ordinal;
}

int device_of_pointer(const void* p) {
  cudaPointerAttributes attributes{};
  CUDAPMR_CHECK(cudaPointerGetAttributes(&attributes, p));
  return attributes.device;
}

/// Writes `seed + i` into `words` with a kernel on `device` (kernels launch on the current device).
void write_on(int device, buffer<std::uint32_t>& words, std::uint32_t seed, stream_ref stream) {
  const detail::scoped_device on(device);
  write_sequence(words.data(), words.size(), seed, stream);
}

std::size_t mismatches_on(int device, const buffer<std::uint32_t>& words, std::uint32_t seed, stream_ref stream) {
  const detail::scoped_device on(device);
  return count_sequence_mismatches(words.data(), words.size(), seed, stream);
}

class MultiDevice : public ::testing::Test {
 protected:
  void SetUp() override { CUDAPMR_REQUIRE_GPUS(2); }
};

TEST_F(MultiDevice, DeviceResourcesAllocateOnTheirOwnDeviceWhateverIsCurrent) {
  const detail::scoped_device current(1);
  device_memory_resource default_pool(0);
  device_memory_resource owned_pool(0, device_pool_options{});
  const cudapmr::stream on_device_1(1);
  for (device_memory_resource* resource : {&default_pool, &owned_pool}) {
    void* synchronous = resource->allocate(mebibyte);
    void* ordered = resource->allocate_async(mebibyte, on_device_1);  // a stream of another device
    on_device_1.synchronize();
    EXPECT_EQ(device_of_pointer(synchronous), 0) << resource->description();
    EXPECT_EQ(device_of_pointer(ordered), 0) << resource->description();
    resource->deallocate_async(ordered, mebibyte, on_device_1);
    resource->deallocate(synchronous, mebibyte);
    EXPECT_EQ(current_device(), 1) << resource->description() << " changed the current device";
  }
  on_device_1.synchronize();
}

TEST_F(MultiDevice, PinnedAndManagedResourcesLeaveTheCurrentDeviceAlone) {
  const detail::scoped_device current(1);
  {
    pinned_memory_resource pinned(pinned_pool_options{});
    managed_memory_resource managed(managed_pool_options{.preferred_device = 0});
    EXPECT_EQ(managed.device_id(), 0);
    EXPECT_EQ(detail::stream_device(managed.bound_stream()), 0);
    for (stream_ordered_resource* resource : std::initializer_list<stream_ordered_resource*>{&pinned, &managed}) {
      void* p = resource->allocate(mebibyte);
      static_cast<unsigned char*>(p)[0] = 1;  // host-accessible, at once
      resource->deallocate(p, mebibyte);
      EXPECT_EQ(current_device(), 1) << resource->description();
    }
  }
  EXPECT_EQ(current_device(), 1);
}

TEST_F(MultiDevice, StreamsBelongToTheirDeviceAndLeaveTheCurrentOneAlone) {
  const detail::scoped_device current(0);
  const cudapmr::stream on_device_1(1);
  EXPECT_EQ(on_device_1.device(), 1);
  EXPECT_EQ(detail::stream_device(on_device_1), 1);
  EXPECT_EQ(current_device(), 0);
}

TEST_F(MultiDevice, PeerAccessLetsAnotherDeviceWriteThePool) {
  if (detail::route_between_devices(1, 0) != detail::device_copy_route::peer)
    GTEST_SKIP() << "devices 0 and 1 cannot reach each other on this machine";
  device_memory_resource pool(0, device_pool_options{});
  EXPECT_FALSE(pool.is_accessible_from(1)) << "a new pool is reachable from its own device only";
  pool.enable_access_from(1);
  EXPECT_TRUE(pool.is_accessible_from(1));

  const cudapmr::stream on_device_0(0);
  const cudapmr::stream on_device_1(1);
  buffer<std::uint32_t> words(pool, word_count, on_device_0);
  on_device_0.synchronize();
  write_on(1, words, 7, on_device_1);  // a kernel of device 1 writes device 0's memory
  on_device_1.synchronize();
  EXPECT_EQ(mismatches_on(0, words, 7, on_device_0), 0u);

  pool.disable_access_from(1);
  EXPECT_FALSE(pool.is_accessible_from(1));
}

TEST(PeerStaging, ALargeStagedCopyHoldsTwoChunksOfPinnedMemory) {
  // The staged route on one device (its two halves on the same device) is
  // the route between devices that cannot reach each other.
  CUDAPMR_REQUIRE_GPU();
  constexpr std::size_t words = (std::size_t{256} << 20) / 4 + 3;  // 256 MiB and an odd tail: 17 chunks
  const cudapmr::stream stream(0);
  buffer<std::uint32_t> source(default_device_resource(0), words, stream);
  buffer<std::uint32_t> destination(default_device_resource(0), words, stream);
  write_on(0, source, 41, stream);
  detail::copy_between_devices(destination.data(), 0, source.data(), 0, destination.size_bytes(), stream,
                               detail::device_copy_route::staged);
  EXPECT_EQ(mismatches_on(0, destination, 41, stream), 0u);
  EXPECT_LE(detail::peer_staging_stats().used_high, 2 * detail::peer_staging_chunk_bytes)
      << "a staged copy held pinned memory for more than two chunks";
}

TEST_F(MultiDevice, BuffersCopyBetweenDevicesByEveryRoute) {
  device_memory_resource& on_0 = default_device_resource(0);
  device_memory_resource& on_1 = default_device_resource(1);
  const cudapmr::stream stream_0(0);
  const cudapmr::stream stream_1(1);
  std::vector<detail::device_copy_route> routes = {detail::device_copy_route::staged};
  if (detail::route_between_devices(1, 0) == detail::device_copy_route::peer)
    routes.push_back(detail::device_copy_route::peer);
  for (const detail::device_copy_route route : routes) {
    SCOPED_TRACE(route == detail::device_copy_route::peer ? "peer route" : "staged route");
    buffer<std::uint32_t> first(on_0, word_count, stream_0);
    buffer<std::uint32_t> second(on_1, word_count, stream_1);
    write_on(0, first, 11, stream_0);
    stream_0.synchronize();
    // Ordered on a stream of the destination's device...
    detail::copy_between_devices(second.data(), 1, first.data(), 0, second.size_bytes(), stream_1, route);
    EXPECT_EQ(mismatches_on(1, second, 11, stream_1), 0u);
    // ...and on a stream of the source's device, after work queued there.
    write_on(1, second, 23, stream_1);
    detail::copy_between_devices(first.data(), 0, second.data(), 1, first.size_bytes(), stream_1, route);
    stream_1.synchronize();
    EXPECT_EQ(mismatches_on(0, first, 23, stream_0), 0u);
  }
}

TEST_F(MultiDevice, BufferCopiesReachAnotherDevicesBuffer) {
  const cudapmr::stream stream_0(0);
  const cudapmr::stream stream_1(1);
  buffer<std::uint32_t> source(default_device_resource(0), word_count, stream_0);
  buffer<std::uint32_t> destination(default_device_resource(1), word_count, stream_0);
  write_on(0, source, 31, stream_0);
  destination.copy_from(source, stream_0);
  stream_0.synchronize();
  EXPECT_EQ(mismatches_on(1, destination, 31, stream_1), 0u);
  buffer<std::uint32_t> back(default_device_resource(0), word_count, stream_0);
  destination.copy_to(back, stream_0);
  EXPECT_EQ(mismatches_on(0, back, 31, stream_0), 0u);
}

TEST_F(MultiDevice, FillRunsOnTheBuffersDeviceWhateverIsCurrent) {
  const detail::scoped_device current(0);
  const cudapmr::stream stream_1(1);
  buffer<std::uint32_t> words(default_device_resource(1), word_count, stream_1);
  words.fill(0x01020304u, stream_1);  // not one repeated byte: the fill kernel
  std::vector<std::uint32_t> host(word_count);
  words.copy_to(std::span<std::uint32_t>(host), stream_1);
  stream_1.synchronize();
  EXPECT_EQ(std::count(host.begin(), host.end(), 0x01020304u), static_cast<std::ptrdiff_t>(word_count));
  EXPECT_EQ(current_device(), 0);
}

// ---- with one GPU -------------------------------------------------------------

TEST(PeerAccess, TheOwningDeviceAlwaysHasAccess) {
  CUDAPMR_REQUIRE_GPU();
  device_memory_resource pool(0, device_pool_options{});
  EXPECT_TRUE(pool.is_accessible_from(0));
  pool.enable_access_from(0);  // nothing to do
  try {
    pool.disable_access_from(0);
    ADD_FAILURE() << "the owning device's access was withdrawn";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("its own pool"), std::string::npos) << error.what();
  }
  EXPECT_TRUE(pool.is_accessible_from(0));
}

TEST(PeerAccess, RefusesDevicesThatDoNotExist) {
  CUDAPMR_REQUIRE_GPU();
  device_memory_resource pool(0, device_pool_options{});
  for (const int bad : {-1, device::count()}) {
    SCOPED_TRACE("device " + std::to_string(bad));
    try {
      pool.enable_access_from(bad);
      ADD_FAILURE() << "enable_access_from accepted it";
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find(std::to_string(bad)), std::string::npos) << error.what();
    }
    EXPECT_THROW(pool.disable_access_from(bad), std::invalid_argument);
    EXPECT_THROW(static_cast<void>(pool.is_accessible_from(bad)), std::invalid_argument);
  }
}

TEST(DeviceCopyRoute, CopiesWithinOneDeviceOrWithTheHostTakeTheOrdinaryPath) {
  CUDAPMR_REQUIRE_GPU();
  const cudapmr::stream stream(0);
  buffer<std::uint32_t> first(default_device_resource(0), 1024, stream);
  buffer<std::uint32_t> second(default_device_resource(0), 1024, stream);
  pinned_memory_resource pinned;
  buffer<std::uint32_t> host_side(pinned, 1024, stream);
  stream.synchronize();
  EXPECT_FALSE(detail::try_copy_between_devices(second.data(), first.data(), first.size_bytes(), stream));
  EXPECT_FALSE(detail::try_copy_between_devices(host_side.data(), first.data(), first.size_bytes(), stream));
  EXPECT_FALSE(detail::try_copy_between_devices(first.data(), host_side.data(), first.size_bytes(), stream));
  EXPECT_EQ(detail::route_between_devices(0, 0), detail::device_copy_route::peer) << "a device reaches itself";
}

}  // namespace
}  // namespace cudapmr::test
