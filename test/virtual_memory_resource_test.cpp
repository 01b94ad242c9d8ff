// SPDX-License-Identifier: Apache-2.0
// virtual_memory_resource keeps the shared contract, unmaps a freed range only
// once the work queued before its free is done, follows what is live, and
// leaves stream captures intact.
#include "support/resource_contract.hpp"

#include <cudapmr/virtual_memory_resource.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace cudapmr::test {
namespace {

constexpr std::size_t gibibyte = std::size_t{1} << 30;

/// Ends the capture on `stream`, which must still be valid, and returns its graph.
cudaGraph_t end_capture(const cudapmr::stream& stream) {
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(stream.get(), &graph), cudaSuccess) << "the capture was broken";
  return graph;
}

class VirtualMemoryResource : public ::testing::Test {
 protected:
  void SetUp() override { CUDAPMR_REQUIRE_GPU(); }
};

TEST_F(VirtualMemoryResource, RoundsEachAllocationToTheGranularityInOneReservation) {
  virtual_memory_resource resource(0);
  const cudapmr::stream stream(0);
  const std::size_t granularity = resource.granularity();
  ASSERT_GT(granularity, 0u);
  EXPECT_EQ(granularity & (granularity - 1), 0u) << "a power of two";
  EXPECT_GE(resource.reserved_address_bytes(), device(0).total_memory() / 8 * 9);
  EXPECT_EQ(resource.reserved_address_bytes() % granularity, 0u);

  void* small = resource.allocate_async(1, stream);
  void* larger = resource.allocate_async(granularity + 1, stream);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(small) % granularity, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(larger), reinterpret_cast<std::uintptr_t>(small) + granularity)
      << "first fit packs the second mapping right after the first";
  EXPECT_EQ(resource.allocated_bytes(), 3 * granularity);
  EXPECT_EQ(resource.mapped_bytes(), 3 * granularity);
  EXPECT_EQ(resource.state().reserved_bytes, resource.mapped_bytes()) << "state() is callable on the type itself";
  EXPECT_EQ(resource.mappings(), 2u);
  resource.deallocate_async(larger, granularity + 1, stream);
  resource.deallocate_async(small, 1, stream);
  EXPECT_EQ(resource.allocated_bytes(), 0u);
  EXPECT_EQ(resource.pending_bytes() + resource.allocated_bytes(), resource.mapped_bytes());
  stream.synchronize();
  resource.release_completed();
  EXPECT_EQ(resource.mapped_bytes(), 0u);
  EXPECT_EQ(resource.mappings(), 0u);
}

TEST_F(VirtualMemoryResource, AFreedRangeStaysMappedWhileWorkQueuedBeforeItsFreeIsHeldBack) {
  virtual_memory_resource resource(0);
  const cudapmr::stream stream(0);
  constexpr std::size_t count = (std::size_t{64} << 20) / sizeof(std::uint32_t);
  auto* words = static_cast<std::uint32_t*>(resource.allocate_async(count * sizeof(std::uint32_t), stream));
  stream_gate gate(stream);
  write_sequence(words, count, 5, stream);  // queued behind the gate: it has not run
  resource.deallocate_async(words, count * sizeof(std::uint32_t), stream);
  const std::size_t pending = resource.pending_bytes();
  EXPECT_EQ(pending, count * sizeof(std::uint32_t));
  // Another allocation polls the pending frees: this one's event has not completed.
  void* other = resource.allocate_async(mebibyte, stream_ref{});
  if (gate.holding()) {
    EXPECT_EQ(resource.mappings(), 2u) << "unmapped while the kernel queued before the free had not run";
    EXPECT_EQ(resource.pending_bytes(), pending);
    EXPECT_NE(other, static_cast<void*>(words)) << "the address of a pending range was handed out again";
  }
  gate.open();
  EXPECT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess) << "the kernel wrote to unmapped memory";
  resource.release_completed();
  EXPECT_EQ(resource.pending_bytes(), 0u);
  EXPECT_EQ(resource.mappings(), 1u);
  resource.deallocate_async(other, mebibyte, stream_ref{});
}

TEST_F(VirtualMemoryResource, AGrowingBlockOnOneStreamTakesOverItsPendingPagesInStreamOrder) {
  virtual_memory_resource resource(0, virtual_memory_options{.exportable = false});
  const cudapmr::stream stream(0);
  constexpr std::size_t small = 64 * mebibyte;
  constexpr std::size_t large = 96 * mebibyte;
  auto* old_words = static_cast<std::uint32_t*>(resource.allocate_async(small, stream));
  stream_gate gate(stream);
  write_sequence(old_words, small / sizeof(std::uint32_t), 5, stream);  // queued behind the gate
  resource.deallocate_async(old_words, small, stream);
  auto* new_words = static_cast<std::uint32_t*>(resource.allocate_async(large, stream));
  if (gate.holding()) {
    // The old pages serve again at a new address: one copy of them, the old range only unmapping later.
    EXPECT_NE(new_words, old_words);
    EXPECT_EQ(resource.mapped_bytes(), large) << "the growing block holds its old pages twice";
    EXPECT_EQ(resource.pending_bytes(), 0u);
    EXPECT_EQ(resource.mappings(), 2u);
  }
  // In stream order: the old write lands first, then this one over the same pages.
  write_sequence(new_words, large / sizeof(std::uint32_t), 9, stream);
  gate.open();
  EXPECT_EQ(count_sequence_mismatches(new_words, large / sizeof(std::uint32_t), 9, stream), 0u);
  resource.release_completed();
  EXPECT_EQ(resource.mappings(), 1u);
  EXPECT_EQ(resource.mapped_bytes(), large);
  resource.deallocate_async(new_words, large, stream);
  stream.synchronize();
  resource.release_completed();
  EXPECT_EQ(resource.mapped_bytes(), 0u);
  EXPECT_EQ(resource.mappings(), 0u);
}

// Pages still used on another stream, and an exportable resource's (each
// allocation one physical allocation, so that it exports as one), stay pending.
TEST_F(VirtualMemoryResource, PendingPagesOfAnotherStreamOrOfAnExportableResourceAreNotTakenOver) {
  for (const bool exportable : {false, true}) {
    virtual_memory_resource resource(0, virtual_memory_options{.exportable = exportable});
    if (exportable && !resource.is_exportable()) continue;  // the driver refused the handle type: not exportable
    const cudapmr::stream first(0);
    const cudapmr::stream second(0);
    constexpr std::size_t bytes = 32 * mebibyte;
    auto* words = static_cast<std::uint32_t*>(resource.allocate_async(bytes, first));
    stream_gate gate(first);
    write_sequence(words, bytes / sizeof(std::uint32_t), 5, first);
    resource.deallocate_async(words, bytes, first);
    void* other = resource.allocate_async(2 * bytes, exportable ? first : second);
    if (gate.holding()) {
      EXPECT_EQ(resource.mapped_bytes(), 3 * bytes) << (exportable ? "exportable" : "another stream");
      EXPECT_EQ(resource.pending_bytes(), bytes);
    }
    gate.open();
    first.synchronize();
    resource.deallocate_async(other, 2 * bytes, exportable ? first : second);
    second.synchronize();
    first.synchronize();
    resource.release_completed();
    EXPECT_EQ(resource.mapped_bytes(), 0u);
  }
}

TEST_F(VirtualMemoryResource, MappedBytesFollowWhatIsLiveAndFreedRangesMergeAgain) {
  virtual_memory_resource resource(0);
  const cudapmr::stream stream(0);
  constexpr std::size_t piece = 64 * mebibyte;
  std::vector<void*> pieces;
  for (std::size_t mapped = 0; mapped < gibibyte; mapped += piece) {
    pieces.push_back(resource.allocate_async(piece, stream));
    EXPECT_EQ(resource.mapped_bytes(), mapped + piece);
  }
  auto* words = static_cast<std::uint32_t*>(pieces.back());
  write_sequence(words, piece / sizeof(std::uint32_t), 3, stream);
  EXPECT_EQ(count_sequence_mismatches(words, piece / sizeof(std::uint32_t), 3, stream), 0u);
  for (void* p : pieces) resource.deallocate_async(p, piece, stream);
  EXPECT_EQ(resource.allocated_bytes(), 0u);
  // The stream had nothing left to run (the count synchronized it): each free unmapped its range at once.
  EXPECT_EQ(resource.pending_bytes(), 0u);
  resource.release_completed();
  EXPECT_EQ(resource.mapped_bytes(), 0u);
  EXPECT_EQ(resource.pending_bytes(), 0u);
  EXPECT_EQ(resource.mappings(), 0u);
  EXPECT_EQ(resource.mapped_bytes_high(), gibibyte);
  // The sixteen freed ranges merged: one allocation of their sum starts where the first did.
  void* whole = resource.allocate_async(gibibyte, stream);
  EXPECT_EQ(whole, pieces.front());
  EXPECT_EQ(resource.mappings(), 1u);
  resource.deallocate_async(whole, gibibyte, stream);
}

TEST_F(VirtualMemoryResource, AllocatesAndFreesInsideAGlobalModeCaptureAndTheGraphReplays) {
  virtual_memory_resource resource(0);
  const cudapmr::stream stream(0);
  constexpr std::size_t count = 1 << 20;
  constexpr std::size_t bytes = count * sizeof(std::uint32_t);
  load_test_kernels();  // not during the capture: lazy loading may synchronize
  ASSERT_EQ(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal), cudaSuccess);
  auto* words = static_cast<std::uint32_t*>(resource.allocate_async(bytes, stream));
  write_sequence(words, count, 11, stream);
  resource.deallocate_async(words, bytes, stream);  // captured: held until release()
  cudaGraph_t graph = end_capture(stream);
  ASSERT_NE(graph, nullptr);
  EXPECT_GE(resource.pending_bytes(), bytes);
  EXPECT_EQ(resource.pending_bytes(), resource.mapped_bytes());
  cudaGraphExec_t executable = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&executable, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 3; ++replay) {
    ASSERT_EQ(cudaGraphLaunch(executable, stream.get()), cudaSuccess);
    EXPECT_EQ(count_sequence_mismatches(words, count, 11, stream), 0u) << "replay " << replay;
  }
  resource.release_completed();  // a captured free is not an event's to retire
  EXPECT_EQ(resource.mappings(), 1u);
  EXPECT_EQ(cudaGraphExecDestroy(executable), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  resource.release();
  EXPECT_EQ(resource.mappings(), 0u);
  EXPECT_EQ(resource.mapped_bytes(), 0u);
}

TEST_F(VirtualMemoryResource, AllocatesAndFreesWhileAnotherThreadCapturesInGlobalMode) {
  virtual_memory_resource resource(0);
  const cudapmr::stream captured(0);
  const cudapmr::stream stream(0);
  load_test_kernels();
  ASSERT_EQ(cudaStreamBeginCapture(captured.get(), cudaStreamCaptureModeGlobal), cudaSuccess);
  std::thread other([&] {
    for (int round = 0; round < 4; ++round) {
      void* p = resource.allocate_async(8 * mebibyte, stream);
      resource.deallocate_async(p, 8 * mebibyte, stream);
    }
  });
  other.join();
  cudaGraph_t graph = end_capture(captured);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  stream.synchronize();
  resource.release_completed();
  EXPECT_EQ(resource.mappings(), 0u) << "frees on the uncaptured stream were held as if captured";
}

TEST_F(VirtualMemoryResource, WhenTheDeviceIsFullPendingFreesAreUnmappedBeforeARefusal) {
  if (under_compute_sanitizer()) GTEST_SKIP() << "filling the device under compute-sanitizer takes too long";
  virtual_memory_resource resource(0);
  const cudapmr::stream stream(0);
  constexpr std::size_t piece = 2 * gibibyte;
  std::vector<void*> pieces;
  try {
    for (;;) pieces.push_back(resource.allocate_async(piece, stream));
  } catch (const out_of_memory& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(resource.description()), std::string::npos) << message;
    EXPECT_NE(message.find(std::to_string(piece)), std::string::npos) << message;
    EXPECT_NE(message.find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << message;
  }
  ASSERT_GE(pieces.size(), 2u);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the refusal left a sticky CUDA error";
  {
    stream_gate gate(stream);
    resource.deallocate_async(pieces.back(), piece, stream);  // pending behind the gate
    pieces.pop_back();
    gate.open();
    // The device is full but for the pending free: it is waited for and unmapped, not refused.
    pieces.push_back(resource.allocate_async(piece, stream));
  }
  EXPECT_EQ(resource.pending_bytes(), 0u);
  for (void* p : pieces) resource.deallocate_async(p, piece, stream);
  resource.release_completed();
  EXPECT_EQ(resource.mapped_bytes(), 0u);
}

TEST_F(VirtualMemoryResource, RefusesExportWhereTheHandleTypeWasNotAskedFor) {
  virtual_memory_resource resource(0, virtual_memory_options{.exportable = false});
  const cudapmr::stream stream(0);
  EXPECT_FALSE(resource.is_exportable());
  void* p = resource.allocate_async(mebibyte, stream);
  try {
    static_cast<void>(resource.export_handle(p));
    ADD_FAILURE() << "an allocation without a handle type was exported";
  } catch (const cuda_error& error) {
    EXPECT_NE(std::string(error.what()).find("POSIX file descriptor"), std::string::npos) << error.what();
  }
  resource.deallocate_async(p, mebibyte, stream);
}

TEST_F(VirtualMemoryResource, CachingAndCoalescingOverItServeAnAllocateUseFreeLoop) {
  virtual_memory_resource leaf(0);
  caching_resource cache(leaf);
  coalescing_resource coalescing(leaf);
  const cudapmr::stream stream(0);
  for (stream_ordered_resource* resource :
       {static_cast<stream_ordered_resource*>(&cache), static_cast<stream_ordered_resource*>(&coalescing)}) {
    for (int round = 0; round < 16; ++round) {
      const std::size_t count = (std::size_t{1} << 16) * static_cast<std::size_t>(1 + round % 4);
      auto* words = static_cast<std::uint32_t*>(resource->allocate_async(count * sizeof(std::uint32_t), stream));
      write_sequence(words, count, static_cast<std::uint32_t>(round), stream);
      EXPECT_EQ(count_sequence_mismatches(words, count, static_cast<std::uint32_t>(round), stream), 0u)
          << resource->description() << ", round " << round;
      resource->deallocate_async(words, count * sizeof(std::uint32_t), stream);
    }
  }
  stream.synchronize();
  EXPECT_GT(cache.statistics().hits, 0u);
  EXPECT_EQ(cache.statistics().upstream_reserved, std::optional<std::size_t>(leaf.mapped_bytes()));
}

TEST_F(VirtualMemoryResource, RefusesADeviceThatDoesNotExistAndAReservationBelowTheGranularity) {
  EXPECT_THROW(virtual_memory_resource(-1), std::invalid_argument);
  EXPECT_THROW(virtual_memory_resource(device::count()), std::invalid_argument);
  try {
    virtual_memory_resource resource(0, virtual_memory_options{.reserve_bytes = 4096});
    ADD_FAILURE() << "a reservation of 4096 bytes was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("reserve_bytes 4096"), std::string::npos) << error.what();
  }
}

TEST_F(VirtualMemoryResource, ARangeTooFragmentedForALargeRequestTheDeviceCanHoldGrowsAnother) {
  // One reservation of 1.125 times the device: half of it mapped, then a
  // small block above it, then the half unmapped. A request for 0.7 of the
  // device has the memory, but neither free range (0.5, about 0.625) fits it.
  if (under_compute_sanitizer()) GTEST_SKIP() << "most of the device, which the tools' shards share";
  const std::size_t total = device(0).total_memory();
  if (device(0).free_memory() < total / 100 * 75) GTEST_SKIP() << "needs three quarters of the device free";
  virtual_memory_resource resource(0);
  const cudapmr::stream stream(0);
  const std::size_t half = total / 2;
  const std::size_t large = total / 10 * 7;
  void* lower = resource.allocate_async(half, stream);
  void* small = resource.allocate_async(2 * mebibyte, stream);
  resource.deallocate_async(lower, half, stream);
  stream.synchronize();
  resource.release_completed();
  ASSERT_EQ(resource.address_reservations(), 1u);
  const std::size_t first_range = resource.reserved_address_bytes();
  void* p = resource.allocate_async(large, stream);
  EXPECT_EQ(resource.address_reservations(), 2u);
  EXPECT_EQ(resource.reserved_address_bytes(), 2 * first_range);
  auto* words = static_cast<std::uint32_t*>(p);
  write_sequence(words, large / sizeof(std::uint32_t), 11, stream);
  EXPECT_EQ(count_sequence_mismatches(words, large / sizeof(std::uint32_t), 11, stream), 0u);
  resource.deallocate_async(p, large, stream);
  stream.synchronize();
  resource.release_completed();
  EXPECT_EQ(resource.address_reservations(), 1u) << "the added range, wholly free, is given back";
  EXPECT_EQ(resource.reserved_address_bytes(), first_range);
  p = resource.allocate_async(large, stream);  // fragmented as before: another range again
  EXPECT_EQ(resource.address_reservations(), 2u);
  resource.deallocate_async(p, large, stream);
  resource.deallocate_async(small, 2 * mebibyte, stream);
  stream.synchronize();
}

TEST_F(VirtualMemoryResource, AFullReservationRefusesWithOutOfMemoryAndKeepsWorking) {
  virtual_memory_resource resource(0, virtual_memory_options{.reserve_bytes = 64 * mebibyte});
  const cudapmr::stream stream(0);
  EXPECT_EQ(resource.reserved_address_bytes(), 64 * mebibyte);
  void* first = resource.allocate_async(48 * mebibyte, stream);
  EXPECT_THROW(static_cast<void>(resource.allocate_async(32 * mebibyte, stream)), out_of_memory);
  resource.deallocate_async(first, 48 * mebibyte, stream);
  // The pending free holds the addresses until its event is waited for; then the request fits.
  void* second = resource.allocate_async(64 * mebibyte, stream);
  EXPECT_EQ(second, first);
  resource.deallocate_async(second, 64 * mebibyte, stream);
}

TEST_F(VirtualMemoryResource, AFullReservationWaitsForAFreeAnotherThreadIsUnmapping) {
  virtual_memory_resource resource(0, virtual_memory_options{.reserve_bytes = 64 * mebibyte});
  const cudapmr::stream stream(0);
  const cudapmr::stream other(0);
  void* first = resource.allocate_async(48 * mebibyte, stream);
  stream_gate gate(stream);
  if (!gate.holding()) GTEST_SKIP() << "no stream gate under compute-sanitizer";
  resource.deallocate_async(first, 48 * mebibyte, stream);  // pending behind the gate
  // Another thread takes the free out of the pending list and waits for its event.
  std::atomic<bool> released{false};
  std::thread releasing([&] {
    try {
      resource.release_completed();
      released = true;
    } catch (...) {  // a failed event wait: reported below
    }
  });
  while (resource.has_frees_waiting_on_work()) std::this_thread::yield();
  EXPECT_EQ(resource.pending_bytes(), 48 * mebibyte) << "the free was unmapped with its work held back";
  // Its addresses are on their way back: the request waits for them rather than refuse.
  auto second = std::async(std::launch::async, [&] { return resource.allocate_async(64 * mebibyte, other); });
  EXPECT_EQ(second.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout)
      << "the request ended while the only free addresses were being unmapped by another thread";
  gate.open();
  releasing.join();
  EXPECT_TRUE(released) << "release_completed threw";
  void* taken = nullptr;
  // A request never woken hangs here (in the future's destructor too); the suite's time limit ends it.
  ASSERT_EQ(second.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "the request was never woken";
  EXPECT_NO_THROW(taken = second.get());
  EXPECT_EQ(taken, first);
  if (taken != nullptr) resource.deallocate_async(taken, 64 * mebibyte, other);
  other.synchronize();
}

TEST(VirtualMemoryResourceWithoutAGpu, ThrowsCudaErrorSayingNoDeviceWasFound) {
  if (gpu_available()) GTEST_SKIP() << "a CUDA device exists: this test is for machines without one";
  try {
    virtual_memory_resource resource(0);
    ADD_FAILURE() << "construction succeeded without a GPU";
  } catch (const cuda_error& error) {
    EXPECT_TRUE(is_no_device_error(error.error())) << error.what();
    EXPECT_NE(std::string(error.what()).find("no CUDA device was found"), std::string::npos) << error.what();
  }
}

}  // namespace

using virtual_memory_cases = ::testing::Types<virtual_memory_case>;
CUDAPMR_INSTANTIATE_RESOURCE_CONTRACT(VirtualMemory, virtual_memory_cases, virtual_memory_cases);
using caching_over_virtual_memory_cases = ::testing::Types<adaptor_case<virtual_memory_case, caching_maker>>;
CUDAPMR_INSTANTIATE_RESOURCE_CONTRACT(CachingOverVirtualMemory, caching_over_virtual_memory_cases,
                                      caching_over_virtual_memory_cases);

}  // namespace cudapmr::test
