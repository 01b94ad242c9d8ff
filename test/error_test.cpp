// SPDX-License-Identifier: Apache-2.0
#include <cudapmr/error.hpp>
#include <cudapmr/stream_ordered_resource.hpp>

#include <gtest/gtest.h>

#include <new>
#include <stdexcept>
#include <string>

namespace cudapmr {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(CudaError, CarriesTheCudaErrorAsItsCode) {
  const cuda_error error(cudaErrorInvalidValue, "cudaMemPoolCreate for device 3");
  EXPECT_EQ(error.code().value(), static_cast<int>(cudaErrorInvalidValue));
  EXPECT_EQ(error.error(), cudaErrorInvalidValue);
  EXPECT_EQ(&error.code().category(), &cuda_category());
  EXPECT_STREQ(cuda_category().name(), "cuda");
}

TEST(CudaError, MessageNamesTheContextAndCudasAnswer) {
  const cuda_error error(cudaErrorInvalidValue, "cudaMemPoolCreate for device 3");
  const std::string message = error.what();
  EXPECT_TRUE(contains(message, "cudaMemPoolCreate for device 3")) << message;
  EXPECT_TRUE(contains(message, "cudaErrorInvalidValue")) << message;
}

TEST(CudaError, IsASystemError) {
  EXPECT_THROW(throw cuda_error(cudaErrorMemoryAllocation, "x"), std::system_error);
}

TEST(CudaError, SaysNoDeviceWasFoundForDriverAndDeviceAbsence) {
  for (const cudaError_t absent : {cudaErrorNoDevice, cudaErrorInsufficientDriver}) {
    EXPECT_TRUE(is_no_device_error(absent));
    const std::string message = cuda_error(absent, "cudaGetDeviceCount").what();
    EXPECT_TRUE(contains(message, "no CUDA device was found")) << message;
  }
  EXPECT_FALSE(is_no_device_error(cudaErrorMemoryAllocation));
}

TEST(CudaCheck, ThrowsNamingTheCallAndTheLine) {
  try {
    CUDAPMR_CHECK(cudaErrorInvalidDevice);
    FAIL() << "CUDAPMR_CHECK did not throw";
  } catch (const cuda_error& error) {
    const std::string message = error.what();
    EXPECT_EQ(error.error(), cudaErrorInvalidDevice);
    EXPECT_TRUE(contains(message, "cudaErrorInvalidDevice")) << message;
    EXPECT_TRUE(contains(message, "error_test.cpp:")) << message;
  }
}

TEST(CudaCheck, SuccessDoesNotThrow) { EXPECT_NO_THROW(CUDAPMR_CHECK(cudaSuccess)); }

TEST(OutOfMemory, IsABadAllocNamingBytesAlignmentAndResource) {
  const out_of_memory error(123456789, 512, "device_memory_resource (device 0, owned pool)", "cudaErrorMemoryAllocation");
  const std::bad_alloc& as_bad_alloc = error;
  const std::string message = as_bad_alloc.what();
  EXPECT_EQ(error.requested_bytes(), 123456789u);
  EXPECT_TRUE(contains(message, "123456789 bytes")) << message;
  EXPECT_TRUE(contains(message, "alignment 512")) << message;
  EXPECT_TRUE(contains(message, "device_memory_resource (device 0, owned pool)")) << message;
  EXPECT_TRUE(contains(message, "cudaErrorMemoryAllocation")) << message;
}

TEST(ValidateAlignment, AcceptsPowersOfTwoUpToTheMaximum) {
  for (std::size_t alignment = 1; alignment <= max_alignment; alignment *= 2)
    EXPECT_NO_THROW(detail::validate_alignment(alignment, 8)) << alignment;
}

TEST(ValidateAlignment, RefusesOthersNamingTheValues) {
  for (const std::size_t alignment : {std::size_t{0}, std::size_t{3}, std::size_t{48}, max_alignment * 2}) {
    try {
      detail::validate_alignment(alignment, 4096);
      ADD_FAILURE() << alignment << " was accepted";
    } catch (const std::invalid_argument& error) {
      EXPECT_TRUE(contains(error.what(), "alignment " + std::to_string(alignment))) << error.what();
      EXPECT_TRUE(contains(error.what(), "4096 bytes")) << error.what();
    }
  }
}

}  // namespace
}  // namespace cudapmr
