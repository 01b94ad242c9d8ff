// SPDX-License-Identifier: Apache-2.0
// Copies between pageable host memory and device or managed memory through
// pinned staging: the chunking here, the copies on a GPU.
#include "support/resource_cases.hpp"

#include <cudapmr/detail/host_thread_pool.hpp>
#include <cudapmr/detail/staged_copy.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <numeric>
#include <thread>
#include <vector>

namespace cudapmr::test {
namespace {

using detail::copy_direction;
using detail::staged_copy_threshold;
using detail::staging_block_bytes;
using detail::staging_block_count;

TEST(StagingChunks, AQuarterOfTheCopyBetweenTheBounds) {
  EXPECT_EQ(detail::staging_chunk_bytes(staged_copy_threshold), detail::min_staging_chunk);
  EXPECT_EQ(detail::staging_chunk_bytes(40 * mebibyte), 10 * mebibyte);
  EXPECT_EQ(detail::staging_chunk_bytes(std::size_t{1} << 30), staging_block_bytes);
  EXPECT_EQ(detail::staging_chunk_bytes((std::size_t{1} << 30) + 13), staging_block_bytes);
  for (const std::size_t bytes : {mebibyte, 3 * mebibyte + 7, 41 * mebibyte + 1, std::size_t{1} << 40}) {
    const std::size_t chunk = detail::staging_chunk_bytes(bytes);
    EXPECT_EQ(chunk % detail::host_copy_granule, 0u) << bytes;
    EXPECT_GE(chunk, detail::min_staging_chunk) << bytes;
    EXPECT_LE(chunk, staging_block_bytes) << bytes;
  }
}

/// Bytes that differ from position to position and from seed to seed.
std::vector<unsigned char> random_bytes(std::size_t count, std::uint64_t seed) {
  std::vector<unsigned char> bytes(count);
  std::uint64_t state = seed;
  for (std::size_t i = 0; i < count; i += sizeof(std::uint64_t)) {
    state += 0x9e3779b97f4a7c15ull;  // splitmix64
    std::uint64_t word = state;
    word = (word ^ (word >> 30)) * 0xbf58476d1ce4e5b9ull;
    word = (word ^ (word >> 27)) * 0x94d049bb133111ebull;
    word ^= word >> 31;
    std::memcpy(bytes.data() + i, &word, std::min(sizeof(word), count - i));
  }
  return bytes;
}

class StagedCopy : public ::testing::Test {
 protected:
  void SetUp() override {
    CUDAPMR_REQUIRE_GPU();
    stream_.emplace(0);
    device_memory_.emplace(0);
    managed_.emplace();
  }

  /// Device memory read and written through the driver's own path, independent of staging.
  static std::vector<unsigned char> read_with_driver(const void* device_memory, std::size_t bytes) {
    std::vector<unsigned char> values(bytes);
    CUDAPMR_CHECK(cudaMemcpy(values.data(), device_memory, bytes, cudaMemcpyDefault));
    return values;
  }
  static void write_with_driver(void* device_memory, const std::vector<unsigned char>& values) {
    CUDAPMR_CHECK(cudaMemcpy(device_memory, values.data(), values.size(), cudaMemcpyDefault));
    // From pageable memory cudaMemcpy may return before its DMA lands, and the
    // copies under test run on a non-blocking stream that does not wait for it.
    CUDAPMR_CHECK(cudaDeviceSynchronize());
  }

  stream_ref stream() const { return stream_->ref(); }

  std::optional<cudapmr::stream> stream_;
  std::optional<device_memory_resource> device_memory_;
  std::optional<managed_memory_resource> managed_;
};

/// Sizes around the pipeline's edges: the threshold, one byte past a chunk
/// boundary, more chunks than staging blocks.
std::vector<std::size_t> odd_sizes() {
  return {staged_copy_threshold, 3 * mebibyte + 7, staging_block_count * staging_block_bytes + 1,
          (staging_block_count + 2) * staging_block_bytes + 4099};
}

TEST_F(StagedCopy, ToDeviceAtOddSizesAndOffsetsMatchesTheDriver) {
  for (const std::size_t bytes : odd_sizes()) {
    const std::vector<unsigned char> source = random_bytes(bytes + 5, bytes);
    buffer<unsigned char> destination(*device_memory_, bytes + 16, stream());
    destination.fill(0xee, stream());
    stream_->synchronize();
    detail::staged_copy_to_device(destination.data() + 3, source.data() + 5, bytes, stream());
    stream_->synchronize();
    const std::vector<unsigned char> copied = read_with_driver(destination.data(), bytes + 16);
    EXPECT_EQ(std::memcmp(copied.data() + 3, source.data() + 5, bytes), 0) << bytes << " bytes";
    for (const std::size_t outside : {std::size_t{0}, std::size_t{2}, bytes + 3, bytes + 15})
      EXPECT_EQ(copied[outside], 0xee) << "byte " << outside << " outside the copy of " << bytes;
  }
}

TEST_F(StagedCopy, ToHostAtOddSizesAndOffsetsMatchesTheDriver) {
  for (const std::size_t bytes : odd_sizes()) {
    const std::vector<unsigned char> expected = random_bytes(bytes + 16, bytes + 1);
    buffer<unsigned char> source(*device_memory_, bytes + 16, stream());
    stream_->synchronize();  // the driver's copy runs on another stream
    write_with_driver(source.data(), expected);
    std::vector<unsigned char> destination(bytes + 8, 0xee);
    detail::staged_copy_to_host(destination.data() + 5, source.data() + 3, bytes, stream());
    EXPECT_EQ(std::memcmp(destination.data() + 5, expected.data() + 3, bytes), 0) << bytes << " bytes";
    for (const std::size_t outside : {std::size_t{0}, std::size_t{4}, bytes + 5, bytes + 7})
      EXPECT_EQ(destination[outside], 0xee) << "byte " << outside << " outside the copy of " << bytes;
  }
}

TEST_F(StagedCopy, BufferOfOneGibibytePlusThirteenBytesRoundTrips) {
  const std::size_t bytes = (std::size_t{1} << 30) + 13;
  const std::vector<unsigned char> source = random_bytes(bytes, 42);
  buffer<unsigned char> on_device(*device_memory_, bytes, stream());
  on_device.copy_from(std::span<const unsigned char>(source), stream());
  stream_->synchronize();
  std::vector<unsigned char> copied = read_with_driver(on_device.data(), bytes);
  EXPECT_TRUE(copied == source) << "the copy to the device differs";
  std::fill(copied.begin(), copied.end(), 0xee);
  on_device.copy_to(std::span<unsigned char>(copied), stream());
  EXPECT_TRUE(copied == source) << "the copy back to the host differs";
}

TEST_F(StagedCopy, ManagedBuffersStageBothWays) {
  const std::size_t count = 5 * mebibyte / sizeof(float) + 3;
  std::vector<float> source(count);
  for (std::size_t i = 0; i < count; ++i) source[i] = static_cast<float>(i) * 0.5f - 1000.0f;
  buffer<float> unified(*managed_, count, stream());
  unified.copy_from(std::span<const float>(source), stream());
  stream_->synchronize();
  EXPECT_TRUE(std::equal(source.begin(), source.end(), unified.span().begin())) << "pageable to managed";
  for (float& value : unified.span()) value = -value;  // the host writes managed memory directly
  std::vector<float> back(count, 7.0f);
  unified.copy_to(std::span<float>(back), stream());
  for (std::size_t i = 0; i < count; i += 997) ASSERT_EQ(back[i], -source[i]) << "managed to pageable, index " << i;
  EXPECT_EQ(back.back(), -source.back());
}

TEST_F(StagedCopy, CopyFromHasReadTheSourceWhenItReturns) {
  // A host function holds the stream, so no DMA of this copy can run yet; the
  // copy fits the staging blocks, so it need not wait for one.
  const std::size_t bytes = staging_block_count * detail::min_staging_chunk + 5;
  const std::vector<unsigned char> original = random_bytes(bytes, 7);
  std::vector<unsigned char> source = original;
  buffer<unsigned char> on_device(*device_memory_, bytes, stream());
  stream_->synchronize();
  CUDAPMR_CHECK(cudaLaunchHostFunc(
      stream().get(), [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(200)); }, nullptr));
  on_device.copy_from(std::span<const unsigned char>(source), stream());
  std::fill(source.begin(), source.end(), 0x11);  // reuse the source at once
  stream_->synchronize();
  EXPECT_TRUE(read_with_driver(on_device.data(), bytes) == original);
}

TEST_F(StagedCopy, CopyToHasTheDataWhenItReturnsAndFollowsStreamOrder) {
  const std::size_t count = 3 * mebibyte + 1;
  buffer<std::uint32_t> on_device(*device_memory_, count, stream());
  write_sequence(on_device.data(), count, 5, stream());
  add_to_each(on_device.data(), count, 2, stream());  // still queued, most likely, when copy_to starts
  std::vector<std::uint32_t> host(count);
  on_device.copy_to(std::span<std::uint32_t>(host), stream());  // no synchronize after it
  std::vector<std::uint32_t> expected(count);
  std::iota(expected.begin(), expected.end(), 7u);
  EXPECT_TRUE(host == expected);
}

TEST_F(StagedCopy, ConcurrentCopiesFromSeveralThreads) {
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int thread = 0; thread < 4; ++thread) {
    threads.emplace_back([this, thread, &failures] {
      const cudapmr::stream own(0);
      for (std::size_t round = 0; round < 6; ++round) {
        const std::size_t bytes = 6 * mebibyte + round * 4099 + static_cast<std::size_t>(thread);
        const std::vector<unsigned char> source = random_bytes(bytes, round * 10 + static_cast<std::size_t>(thread));
        buffer<unsigned char> on_device(*device_memory_, bytes, own);
        on_device.copy_from(std::span<const unsigned char>(source), own);
        std::vector<unsigned char> back(bytes);
        on_device.copy_to(std::span<unsigned char>(back), own);
        if (back != source) ++failures[static_cast<std::size_t>(thread)];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures, std::vector<int>(4, 0));
}

TEST_F(StagedCopy, OnlyLargePageableToDeviceSideCopiesStage) {
  const std::size_t bytes = staged_copy_threshold;
  std::vector<unsigned char> pageable = random_bytes(bytes, 3);
  pinned_memory_resource pinned;
  buffer<unsigned char> on_device(*device_memory_, bytes, stream());
  buffer<unsigned char> unified(*managed_, bytes, stream());
  buffer<unsigned char> page_locked(pinned, bytes, stream());
  unified.fill(0x5a, stream());  // a source below: its bytes must hold something
  page_locked.fill(0xa5, stream());
  stream_->synchronize();
  EXPECT_TRUE(detail::try_staged_copy(on_device.data(), pageable.data(), bytes, copy_direction::to_device, stream()));
  EXPECT_TRUE(detail::try_staged_copy(pageable.data(), unified.data(), bytes, copy_direction::to_host, stream()));
  EXPECT_FALSE(detail::try_staged_copy(on_device.data(), pageable.data(), bytes - 1, copy_direction::to_device,
                                       stream()))
      << "below the threshold the driver's path stays";
  EXPECT_FALSE(detail::try_staged_copy(on_device.data(), page_locked.data(), bytes, copy_direction::to_device,
                                       stream()))
      << "pinned memory needs no staging";
  EXPECT_FALSE(detail::try_staged_copy(page_locked.data(), pageable.data(), bytes, copy_direction::to_device,
                                       stream()))
      << "a pinned destination is host memory";
  stream_->synchronize();
}

// A graph replays its copies long after the call that captured them: a copy
// captured through staging would replay from blocks that other copies fill
// meanwhile, and events recorded in the capture cannot be waited for later.
TEST_F(StagedCopy, ACapturedCopyTakesTheDriversPathAndStagingServesOnAfterIt) {
  const std::size_t bytes = 4 * mebibyte;
  const std::vector<unsigned char> captured = random_bytes(bytes, 21);
  const std::vector<unsigned char> meanwhile = random_bytes(bytes, 22);
  const std::vector<unsigned char> at_replay = random_bytes(bytes, 23);
  std::vector<unsigned char> source = captured;
  buffer<unsigned char> target(*device_memory_, bytes, stream());
  buffer<unsigned char> other(*device_memory_, bytes, stream());
  stream_->synchronize();

  ASSERT_EQ(cudaStreamBeginCapture(stream().get(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT_FALSE(detail::try_staged_copy(target.data(), source.data(), bytes, copy_direction::to_device, stream()));
  EXPECT_THROW(detail::staged_copy_to_device(target.data(), source.data(), bytes, stream()), std::invalid_argument);
  bool taken = true;
  try {
    target.copy_from(std::span<const unsigned char>(source), stream());
  } catch (const cuda_error& refused) {  // CUDA may refuse a copy of pageable memory in a capture
    taken = false;
    RecordProperty("captured_copy", refused.what());
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream().get(), &graph);
  static_cast<void>(cudaGetLastError());

  // The staging blocks serve the next copy, which fills them with other bytes.
  other.copy_from(std::span<const unsigned char>(meanwhile), stream());
  stream_->synchronize();
  EXPECT_TRUE(read_with_driver(other.data(), bytes) == meanwhile);
  if (!taken || ended != cudaSuccess) {
    if (graph != nullptr) static_cast<void>(cudaGraphDestroy(graph));
    return;
  }
  cudaGraphExec_t replay = nullptr;
  if (cudaGraphInstantiate(&replay, graph, 0) != cudaSuccess) {  // CUDA may refuse the copy only here
    static_cast<void>(cudaGetLastError());
    RecordProperty("captured_copy", "cudaGraphInstantiate refused the graph");
    static_cast<void>(cudaGraphDestroy(graph));
    return;
  }
  source = at_replay;
  ASSERT_EQ(cudaGraphLaunch(replay, stream().get()), cudaSuccess);
  stream_->synchronize();
  const std::vector<unsigned char> replayed = read_with_driver(target.data(), bytes);
  EXPECT_TRUE(replayed == captured || replayed == at_replay)
      << "the replay copied bytes of neither the source at capture nor at replay (a staging block another copy "
         "filled: " << (replayed == meanwhile) << ")";
  static_cast<void>(cudaGraphExecDestroy(replay));
  static_cast<void>(cudaGraphDestroy(graph));
}

// A copy waits for its own stream's earlier work at most: a staging set whose
// DMAs still wait behind another stream's work is passed over for another.
TEST_F(StagedCopy, ACopyDoesNotWaitForAnotherStreamsWork) {
  const std::size_t bytes = 4 * mebibyte;
  const std::vector<unsigned char> source = random_bytes(bytes, 31);
  buffer<unsigned char> first(*device_memory_, bytes, stream());
  buffer<unsigned char> second(*device_memory_, bytes, stream());
  stream_->synchronize();
  detail::give_back_idle_staging();  // the one idle set below is the held copy's
  const cudapmr::stream held(0);
  const cudapmr::stream other(0);
  stream_gate gate(held);
  first.copy_from(std::span<const unsigned char>(source), held);  // its DMAs wait behind the gate
  std::future<void> copied = std::async(std::launch::async, [&] {
    second.copy_from(std::span<const unsigned char>(source), other);
    other.synchronize();
  });
  const bool without_waiting = copied.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  gate.open();
  copied.get();
  held.synchronize();
  EXPECT_TRUE(without_waiting) << "the copy on another stream waited for the held stream's work";
  EXPECT_TRUE(read_with_driver(first.data(), bytes) == source);
  EXPECT_TRUE(read_with_driver(second.data(), bytes) == source);
}

}  // namespace
}  // namespace cudapmr::test
