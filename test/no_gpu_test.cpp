// SPDX-License-Identifier: Apache-2.0
// What happens on a machine without a GPU: every CUDA-backed object refuses
// clearly. These tests skip where a GPU exists.
#include "support/gpu.hpp"

#include <cudapmr/cudapmr.hpp>

#include <gtest/gtest.h>

#include <string>

namespace cudapmr {
namespace {

class NoGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (test::gpu_available()) GTEST_SKIP() << "a CUDA device exists: these tests are for machines without one";
  }

  template <class Construct>
  static void expect_no_device_error(Construct construct) {
    try {
      construct();
      ADD_FAILURE() << "construction succeeded without a GPU";
    } catch (const cuda_error& error) {
      EXPECT_TRUE(is_no_device_error(error.error())) << error.what();
      EXPECT_NE(std::string(error.what()).find("no CUDA device was found"), std::string::npos) << error.what();
    }
  }
};

TEST_F(NoGpu, DeviceCountIsZero) { EXPECT_EQ(device::count(), 0); }

TEST_F(NoGpu, DeviceResourceThrowsCudaErrorSayingSo) {
  expect_no_device_error([] { device_memory_resource resource(0); });
  expect_no_device_error([] { device_memory_resource resource(0, device_pool_options{}); });
  expect_no_device_error([] { static_cast<void>(default_device_resource(0)); });
}

TEST_F(NoGpu, PinnedResourceThrowsCudaErrorSayingSo) {
  expect_no_device_error([] { pinned_memory_resource resource; });
  expect_no_device_error([] { pinned_memory_resource resource(pinned_pool_options{}); });
  expect_no_device_error([] { static_cast<void>(default_pinned_resource()); });
  expect_no_device_error([] { static_cast<void>(default_pinned_resource()); });  // a failed first use is retried
}

TEST_F(NoGpu, ManagedResourceThrowsCudaErrorSayingSo) {
  expect_no_device_error([] { managed_memory_resource resource; });
  expect_no_device_error([] { managed_memory_resource resource(managed_pool_options{.preferred_device = 0}); });
  expect_no_device_error([] { static_cast<void>(default_managed_resource()); });
  expect_no_device_error([] { static_cast<void>(default_managed_resource()); });
}

TEST_F(NoGpu, DevicesAndStreamsThrowCudaErrorSayingSo) {
  expect_no_device_error([] { device gpu(0); });
  expect_no_device_error([] { static_cast<void>(device::current()); });
  expect_no_device_error([] { stream created; });
  expect_no_device_error([] { stream created(0); });
}

}  // namespace
}  // namespace cudapmr
