// SPDX-License-Identifier: Apache-2.0
// current_resource.hpp: the per-device registry, and buffers that draw from it.
#include "support/resource_cases.hpp"

#include <cudapmr/current_resource.hpp>
#include <cudapmr/detail/device_resource_registry.hpp>

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace cudapmr::test {
namespace {

/// A fallback that stands in for default_device_resource on machines without a GPU.
std::array<host_memory_resource, 2> fallbacks;
stream_ordered_resource& host_fallback(int device) {
  if (device < 0 || device >= static_cast<int>(fallbacks.size())) throw std::invalid_argument("no such device");
  return fallbacks[static_cast<std::size_t>(device)];
}

TEST(DeviceResourceRegistry, DefaultsToTheFallbackPerDevice) {
  detail::device_resource_registry registry(host_fallback);
  EXPECT_EQ(&registry.get(0), &fallbacks[0]);
  EXPECT_EQ(&registry.get(1), &fallbacks[1]);
}

TEST(DeviceResourceRegistry, SetReturnsThePreviousResourceAndGetSeesTheNewOne) {
  detail::device_resource_registry registry(host_fallback);
  host_memory_resource first, second;
  EXPECT_EQ(&registry.set(0, first), &fallbacks[0]);
  EXPECT_EQ(&registry.get(0), &first);
  EXPECT_EQ(&registry.set(0, second), &first);
  EXPECT_EQ(&registry.get(0), &second);
  EXPECT_EQ(&registry.get(1), &fallbacks[1]) << "devices are independent";
  EXPECT_EQ(&registry.set(0, fallbacks[0]), &second);
}

TEST(DeviceResourceRegistry, ABadDeviceLeavesNothingBehind) {
  detail::device_resource_registry registry(host_fallback);
  host_memory_resource resource;
  EXPECT_THROW(static_cast<void>(registry.get(7)), std::invalid_argument);
  EXPECT_THROW(static_cast<void>(registry.set(7, resource)), std::invalid_argument);
  EXPECT_THROW(static_cast<void>(registry.get(7)), std::invalid_argument) << "the failed set registered nothing";
}

TEST(DeviceResourceRegistry, SixteenThreadsSetAndGetSafely) {
  detail::device_resource_registry registry(host_fallback);
  std::array<host_memory_resource, 16> resources;
  std::atomic<int> strangers{0};
  std::vector<std::thread> workers;
  for (std::size_t index = 0; index < resources.size(); ++index) {
    workers.emplace_back([&, index] {
      for (int i = 0; i < 2000; ++i) {
        stream_ordered_resource& previous = registry.set(0, resources[index]);
        stream_ordered_resource& seen = registry.get(0);
        const bool known = &previous == &fallbacks[0] ||
                           (&previous >= &resources.front() && &previous <= &resources.back());
        const bool known_seen = &seen >= &resources.front() && &seen <= &resources.back();
        if (!known || !known_seen) ++strangers;
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  EXPECT_EQ(strangers.load(), 0);
}

TEST(CurrentDeviceResource, DefaultsToTheDefaultDeviceResource) {
  CUDAPMR_REQUIRE_GPU();
  EXPECT_EQ(&current_device_resource(0), &default_device_resource(0));
  device(0).set_current();
  EXPECT_EQ(&current_device_resource(), &current_device_resource(0));
}

TEST(CurrentDeviceResource, SetReturnsThePreviousAndScopesRestoreIt) {
  CUDAPMR_REQUIRE_GPU();
  device(0).set_current();
  statistics_adaptor counted(default_device_resource(0));
  stream_ordered_resource& before = current_device_resource();
  {
    const scoped_current_device_resource scope(0, counted);
    EXPECT_EQ(&current_device_resource(), &counted);
    EXPECT_EQ(&current_device_resource(0), &counted);
  }
  EXPECT_EQ(&current_device_resource(), &before);
  EXPECT_EQ(&set_current_device_resource(counted), &before);
  EXPECT_EQ(&set_current_device_resource(0, before), &counted);
}

TEST(CurrentDeviceResource, RefusesADeviceThatDoesNotExist) {
  CUDAPMR_REQUIRE_GPU();
  host_memory_resource resource;
  EXPECT_THROW(static_cast<void>(current_device_resource(device::count())), std::invalid_argument);
  EXPECT_THROW(static_cast<void>(set_current_device_resource(device::count(), resource)), std::invalid_argument);
}

TEST(CurrentDeviceResource, BuffersWithoutAResourceDrawFromIt) {
  CUDAPMR_REQUIRE_GPU();
  device(0).set_current();
  const cudapmr::stream stream(0);
  statistics_adaptor counted(default_device_resource(0));
  const scoped_current_device_resource scope(0, counted);
  {
    buffer<float> values(1000, stream);
    EXPECT_EQ(values.resource(), &counted);
    EXPECT_EQ(counted.statistics().bytes.current, static_cast<std::int64_t>(1000 * sizeof(float)));
  }
  EXPECT_EQ(counted.statistics().bytes.current, 0);
  stream.synchronize();
}

TEST(CurrentDeviceResource, WithoutAGpuThereIsNoCurrentResource) {
  if (gpu_available()) GTEST_SKIP() << "a CUDA device exists: this test is for machines without one";
  EXPECT_THROW(static_cast<void>(current_device_resource()), cuda_error);
  EXPECT_THROW(buffer<int>(16, stream_ref{}), cuda_error);
}

}  // namespace
}  // namespace cudapmr::test
