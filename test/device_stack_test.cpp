// SPDX-License-Identifier: Apache-2.0
// device_stack: the shared contract, its layers in a snapshot, memory that
// follows what is live (its capture: capture_test.cpp).
#include "support/gpu.hpp"
#include "support/resource_contract.hpp"

#include <cudapmr/device.hpp>
#include <cudapmr/device_stack.hpp>
#include <cudapmr/memory_snapshot.hpp>
#include <cudapmr/stream.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace cudapmr::test {

struct device_stack_case {
  static constexpr const char* name = "device_stack";
  static constexpr bool needs_gpu = true;
  static std::unique_ptr<stream_ordered_resource> make() { return std::make_unique<device_stack>(0); }
  static std::size_t exhausting_request() { return impossible_request; }
};

namespace {

TEST(DeviceStack, ASnapshotShowsEachLayer) {
  CUDAPMR_REQUIRE_GPU();
  device_stack stack(0);
  const cudapmr::stream stream(0);
  void* small = stack.allocate_async(4096, stream);
  void* large = stack.allocate_async(64 * mebibyte, stream);
  const memory_snapshot taken = snapshot(stack);
  ASSERT_EQ(taken.resources.size(), 4u);
  EXPECT_EQ(taken.resources[0].name, "device_stack (device 0)");
  EXPECT_EQ(taken.resources[1].name, "caching_resource");
  EXPECT_EQ(taken.resources[2].name, "coalescing_resource");
  EXPECT_EQ(taken.resources[3].name, "virtual_memory_resource (device 0)");
  EXPECT_GE(taken.resources[3].reserved_bytes.value_or(0), 64 * mebibyte + 4096);
  // The stack reports itself as one resource too: what users hold, what the leaf maps.
  const resource_state whole = stack.state();
  EXPECT_EQ(whole.used_bytes, 64 * mebibyte + 4096);
  EXPECT_EQ(whole.reserved_bytes, taken.resources[3].reserved_bytes);
  stack.deallocate_async(small, 4096, stream);
  stack.deallocate_async(large, 64 * mebibyte, stream);
}

TEST(DeviceStack, ReportsNothingUsedOnceOddSizesAndAlignmentsAreAllFreed) {
  // The engine rounds the front's blocks its own way (512 B, 2 MiB steps): the
  // stack's used bytes are the front's count of what is live, not the
  // engine's less what the front caches.
  CUDAPMR_REQUIRE_GPU();
  device_stack stack(0);
  const cudapmr::stream stream(0);
  std::vector<std::pair<void*, std::size_t>> blocks;
  for (std::size_t alignment = 1; alignment <= max_alignment; alignment <<= 1)
    for (const std::size_t bytes : {std::size_t{1}, alignment + 1, 3 * mebibyte + 7})
      blocks.emplace_back(stack.allocate_async(bytes, alignment, stream), bytes);
  EXPECT_GT(stack.state().used_bytes.value_or(0), 0u);
  std::size_t alignment = 1;
  for (std::size_t index = 0; index < blocks.size(); ++index) {
    stack.deallocate_async(blocks[index].first, blocks[index].second, alignment, stream);
    if (index % 3 == 2) alignment <<= 1;
  }
  stream.synchronize();
  EXPECT_EQ(stack.state().used_bytes, 0u);
}

TEST(DeviceStack, WhatTheDeviceHoldsFollowsWhatIsLive) {
  CUDAPMR_REQUIRE_GPU();
  device_stack stack(0);
  const cudapmr::stream stream(0);
  std::vector<std::pair<void*, std::size_t>> live;
  for (std::size_t bytes = mebibyte; bytes <= 256 * mebibyte; bytes += bytes / 10)
    live.emplace_back(stack.allocate_async(bytes, stream), bytes);
  std::size_t held = 0;
  for (const auto& [p, bytes] : live) held += bytes;
  EXPECT_LE(stack.leaf().mapped_bytes(), held + held / 10 + 64 * mebibyte);
  for (const auto& [p, bytes] : live) stack.deallocate_async(p, bytes, stream);
  stack.trim(stream);
  EXPECT_EQ(stack.leaf().mapped_bytes(), 0u);
  EXPECT_EQ(stack.engine().statistics().reserved_bytes, 0u);
}

TEST(DeviceStack, ANegativeIdleReleaseIsRefusedByNameBeforeAnyCudaCall) {
  // No GPU needed: the options are checked first.
  try {
    device_stack stack(0, {.idle_release = std::chrono::milliseconds(-1)});
    FAIL() << "a negative idle_release was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("idle_release of -1 ms"), std::string::npos) << error.what();
  }
}

TEST(DeviceStack, AfterABurstIsFreedAndTheProgramIdlesTheLeafUnmapsItWithoutBeingCalled) {
  CUDAPMR_REQUIRE_GPU();
  device_stack stack(0, {.idle_release = std::chrono::milliseconds(50)});
  const cudapmr::stream stream(0);
  std::vector<void*> burst;
  for (int i = 0; i < 64; ++i) burst.push_back(stack.allocate_async(16 * mebibyte, stream));
  for (void* p : burst) stack.deallocate_async(p, 16 * mebibyte, stream);
  stream.synchronize();
  EXPECT_GT(stack.leaf().mapped_bytes(), 256 * mebibyte) << "half the 1 GiB peak stays mapped at the frees";
  // No call into the stack from here: its idle thread gives the memory back.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (stack.leaf().mapped_bytes() > 64 * mebibyte && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_LE(stack.leaf().mapped_bytes(), 64 * mebibyte) << "the engine keeps at most max_idle_bytes once idle";
}

/// A burst of 16 MiB blocks to 60 % of what the device has free, all freed on `stream`.
std::size_t freed_burst(device_stack& stack, const cudapmr::stream& stream, std::size_t free_at_start) {
  constexpr std::size_t block = 16 * mebibyte;
  std::vector<void*> burst;
  std::size_t held = 0;
  for (; held < free_at_start / 10 * 6; held += block) burst.push_back(stack.allocate_async(block, stream));
  for (void* p : burst) stack.deallocate_async(p, block, stream);
  stream.synchronize();
  return held;
}

TEST(DeviceStack, AFreedBurstIsGivenBackWithinASecondForAnotherLibraryToAllocateNinetyPercent) {
  CUDAPMR_REQUIRE_GPU();
  if (under_compute_sanitizer()) GTEST_SKIP() << "filling the device under compute-sanitizer takes too long";
  device_stack stack(0);  // the default idle release
  const cudapmr::stream stream(0);
  const std::size_t free_at_start = device(0).free_memory();
  const std::size_t burst = freed_burst(stack, stream, free_at_start);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_LE(stack.leaf().mapped_bytes(), burst / 20) << "more than 5 % of the burst is still held after 1 s idle";
  void* other_library = nullptr;  // cudaMalloc, which knows nothing of the stack
  const std::size_t request = free_at_start / 10 * 9;
  EXPECT_EQ(cudaMalloc(&other_library, request), cudaSuccess) << request << " bytes after the stack gave back";
  if (other_library != nullptr) {
    EXPECT_EQ(cudaFree(other_library), cudaSuccess);
  }
  static_cast<void>(cudaGetLastError());
}

TEST(DeviceStack, ItsOwnNinetyPercentRequestSucceedsWhateverItHadCached) {
  CUDAPMR_REQUIRE_GPU();
  if (under_compute_sanitizer()) GTEST_SKIP() << "filling the device under compute-sanitizer takes too long";
  device_stack stack(0, {.idle_release = std::chrono::milliseconds(0)});  // no idle thread: all stays cached
  const cudapmr::stream stream(0);
  const std::size_t free_at_start = device(0).free_memory();
  static_cast<void>(freed_burst(stack, stream, free_at_start));
  EXPECT_GT(stack.leaf().mapped_bytes(), 64 * mebibyte) << "the burst was to be kept in part";
  const std::size_t request = free_at_start / 10 * 9;
  void* whole = nullptr;
  EXPECT_NO_THROW(whole = stack.allocate_async(request, stream));
  if (whole != nullptr) {
    stack.deallocate_async(whole, request, stream);
  }
  stack.trim(stream);
}

TEST(DeviceStack, TheProcessDefaultIsOnePerDevice) {
  CUDAPMR_REQUIRE_GPU();
  EXPECT_EQ(&default_device_stack(0), &default_device_stack(0));
  EXPECT_THROW(static_cast<void>(default_device_stack(device::count())), std::invalid_argument);
  EXPECT_EQ(&default_device_stack(-1), &default_device_stack(device::current().ordinal()));
}

TEST(DeviceStack, OnlyMinusOneNamesTheCurrentDevice) {  // refused before CUDA is asked: also without a GPU
  for (const int ordinal : {-2, -100}) {
    try {
      static_cast<void>(default_device_stack(ordinal));
      ADD_FAILURE() << "default_device_stack(" << ordinal << ") gave a stack";
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find("device ordinal " + std::to_string(ordinal)), std::string::npos)
          << error.what();
    }
  }
}

/// Registered before the default stack's exit handler, so run after it: the
/// process's status says whether the stack still maps anything.
void exit_with_whether_the_default_stack_maps_memory() {
  std::_Exit(default_device_stack(0).leaf().mapped_bytes() == 0 ? 0 : 1);
}

TEST(DeviceStack, TheProcessDefaultGivesBackWhatItHoldsIdleAtExit) {
  CUDAPMR_REQUIRE_GPU();
  // There memcheck's leak check of the demo asks the same, and this test's child process never ends.
  if (under_compute_sanitizer()) GTEST_SKIP() << "a death test's fresh process does not end under compute-sanitizer";
  // A fresh process, not a fork: a forked child leaves its parent's stacks alone at exit.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        std::atexit(exit_with_whether_the_default_stack_maps_memory);
        device_stack& stack = default_device_stack(0);
        stack.deallocate(stack.allocate(mebibyte), mebibyte);  // the pmr path
        const cudapmr::stream stream(0);
        stack.deallocate_async(stack.allocate_async(8 * mebibyte, stream), 8 * mebibyte, stream);  // past the front
        stream.synchronize();
        std::exit(2);
      },
      ::testing::ExitedWithCode(0), "")
      << "the default stack still mapped memory when the process ended (compute-sanitizer's memcheck reports it)";
}

}  // namespace

using device_stack_cases = ::testing::Types<device_stack_case>;
CUDAPMR_INSTANTIATE_RESOURCE_CONTRACT(DeviceStack, device_stack_cases, device_stack_cases);

}  // namespace cudapmr::test
