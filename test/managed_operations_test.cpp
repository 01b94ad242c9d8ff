// SPDX-License-Identifier: Apache-2.0
// Prefetch and advice over managed memory, on the managed resource and on
// managed buffers.
#include "support/resource_cases.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace cudapmr::test {
namespace {

/// Runs `operation`, which must throw std::invalid_argument whose message contains `expected`.
void expect_invalid_argument(const std::function<void()>& operation, const std::string& expected) {
  try {
    operation();
    ADD_FAILURE() << "accepted; expected an error mentioning \"" << expected << "\"";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
  }
}

TEST(ManagedHints, LocationsNameTheHostOrOneDevice) {
  static_assert(memory_location::host().is_host());
  static_assert(!memory_location::device(0).is_host());
  static_assert(memory_location::device(3).device_ordinal() == 3);
  static_assert(memory_location::host().device_ordinal() == -1);
  static_assert(memory_location::device(1) != memory_location::device(2));
  EXPECT_EQ(to_string(managed_advice::set_accessed_by), "set_accessed_by");
  EXPECT_EQ(to_string(managed_advice::unset_read_mostly), "unset_read_mostly");
}

TEST(ManagedHints, BufferOfPageableMemoryRefusesNamingItsKind) {
  host_memory_resource pageable;
  const buffer<float> values(pageable, 64, stream_ref{});
  expect_invalid_argument([&] { values.prefetch_to_host(stream_ref{}); }, "pageable memory");
  expect_invalid_argument([&] { values.prefetch_to_device(0, stream_ref{}); }, "prefetch_to_device");
  expect_invalid_argument([&] { values.advise(managed_advice::set_read_mostly); }, "advise needs a managed buffer");
  buffer<float> closed(pageable, 4, stream_ref{});
  closed.close();
  expect_invalid_argument([&] { closed.prefetch_to_host(stream_ref{}); }, "closed or moved-from");
}

class ManagedOperations : public ::testing::Test {
 protected:
  void SetUp() override {
    CUDAPMR_REQUIRE_GPU();
    stream_.emplace(0);
    managed_.emplace();
  }

  /// A range attribute of `bytes` at `p` that fits in an int.
  static int range_attribute(const void* p, std::size_t bytes, cudaMemRangeAttribute attribute) {
    int value = 0;
    CUDAPMR_CHECK(cudaMemRangeGetAttribute(&value, sizeof(value), attribute, p, bytes));
    return value;
  }
  /// Whether a location type a range attribute gave names host memory (any NUMA node).
  static bool is_host(int location_type) {
    return location_type == cudaMemLocationTypeHost || location_type == cudaMemLocationTypeHostNuma ||
           location_type == cudaMemLocationTypeHostNumaCurrent;
  }

  std::optional<cudapmr::stream> stream_;
  std::optional<managed_memory_resource> managed_;
};

TEST_F(ManagedOperations, PrefetchMovesTheBufferWhereAskedAndKeepsItsValues) {
  const std::size_t count = 4 * mebibyte / sizeof(std::uint32_t) + 5;
  buffer<std::uint32_t> values(*managed_, count, *stream_);
  stream_->synchronize();
  for (std::size_t i = 0; i < count; ++i) values.span()[i] = static_cast<std::uint32_t>(11 + i);
  mark_initialized(values.span(), *stream_);  // host stores initcheck does not see

  values.prefetch_to_device(0, *stream_);
  stream_->synchronize();
  EXPECT_EQ(range_attribute(values.data(), values.size_bytes(), cudaMemRangeAttributeLastPrefetchLocationType),
            cudaMemLocationTypeDevice);
  EXPECT_EQ(range_attribute(values.data(), values.size_bytes(), cudaMemRangeAttributeLastPrefetchLocationId), 0);
  EXPECT_EQ(count_sequence_mismatches(values.data(), count, 11, *stream_), 0u);
  add_to_each(values.data(), count, 1, *stream_);

  values.prefetch_to_host(*stream_);
  stream_->synchronize();
  EXPECT_TRUE(is_host(
      range_attribute(values.data(), values.size_bytes(), cudaMemRangeAttributeLastPrefetchLocationType)));
  for (std::size_t i = 0; i < count; i += 4097) ASSERT_EQ(values.span()[i], 12 + i) << i;
  EXPECT_EQ(values.span()[count - 1], 12 + count - 1);
}

TEST_F(ManagedOperations, ResourcePrefetchesAnyManagedRange) {
  const std::size_t bytes = 3 * mebibyte;
  void* p = managed_->allocate(bytes);
  std::fill_n(static_cast<unsigned char*>(p), bytes, 0x5a);
  auto* second_half = static_cast<unsigned char*>(p) + bytes / 2;
  managed_->prefetch_to_device(second_half, bytes / 2, 0, *stream_);
  stream_->synchronize();
  EXPECT_EQ(range_attribute(second_half, bytes / 2, cudaMemRangeAttributeLastPrefetchLocationType),
            cudaMemLocationTypeDevice);
  managed_->prefetch_to_host(p, bytes, *stream_);
  stream_->synchronize();
  EXPECT_TRUE(is_host(range_attribute(p, bytes, cudaMemRangeAttributeLastPrefetchLocationType)));
  managed_->prefetch_to_host(nullptr, 0, *stream_);  // nothing to do
  managed_->deallocate(p, bytes);
}

TEST_F(ManagedOperations, ReadMostlyAdviceIsRecordedOrRefusedByThePool) {
  buffer<float> values(*managed_, mebibyte, *stream_);
  stream_->synchronize();
  const void* p = values.data();
  const std::size_t bytes = values.size_bytes();
  // The H200's driver (CUDA 13.0) refuses read-mostly for memory of managed
  // pools; where it is accepted, it must show in the range's attributes.
  try {
    values.advise(managed_advice::set_read_mostly);
  } catch (const cuda_error& error) {
    EXPECT_EQ(error.error(), cudaErrorNotSupported) << error.what();
    EXPECT_NE(std::string(error.what()).find("set_read_mostly"), std::string::npos) << error.what();
    return;
  }
  EXPECT_EQ(range_attribute(p, bytes, cudaMemRangeAttributeReadMostly), 1);
  values.advise(managed_advice::unset_read_mostly);
  EXPECT_EQ(range_attribute(p, bytes, cudaMemRangeAttributeReadMostly), 0);
}

TEST_F(ManagedOperations, LocationAdviceIsRecordedAndUndoneOrRefusedByThePool) {
  buffer<float> values(*managed_, mebibyte, *stream_);
  stream_->synchronize();
  const void* p = values.data();
  const std::size_t bytes = values.size_bytes();
  // As for read-mostly, CUDA 13.0's driver refuses location advice for memory
  // of managed pools; the refusal must name the advice and CUDA's answer.
  try {
    values.advise(managed_advice::set_preferred_location, memory_location::device(0));
  } catch (const cuda_error& error) {
    EXPECT_EQ(error.error(), cudaErrorNotSupported) << error.what();
    EXPECT_NE(std::string(error.what()).find("set_preferred_location"), std::string::npos) << error.what();
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    return;
  }

  values.advise(managed_advice::set_preferred_location, memory_location::device(0));
  EXPECT_EQ(range_attribute(p, bytes, cudaMemRangeAttributePreferredLocationType), cudaMemLocationTypeDevice);
  EXPECT_EQ(range_attribute(p, bytes, cudaMemRangeAttributePreferredLocationId), 0);
  managed_->advise(p, bytes, managed_advice::set_preferred_location, memory_location::host());
  EXPECT_TRUE(is_host(range_attribute(p, bytes, cudaMemRangeAttributePreferredLocationType)));
  values.advise(managed_advice::unset_preferred_location);
  EXPECT_FALSE(is_host(range_attribute(p, bytes, cudaMemRangeAttributePreferredLocationType)));
  EXPECT_NE(range_attribute(p, bytes, cudaMemRangeAttributePreferredLocationType), cudaMemLocationTypeDevice);

  const auto accessed_by = [&] {
    std::vector<int> devices(static_cast<std::size_t>(device::count()), -2);
    CUDAPMR_CHECK(cudaMemRangeGetAttribute(devices.data(), devices.size() * sizeof(int),
                                           cudaMemRangeAttributeAccessedBy, p, bytes));
    return std::count(devices.begin(), devices.end(), 0) == 1;
  };
  values.advise(managed_advice::set_accessed_by, memory_location::device(0));
  EXPECT_TRUE(accessed_by());
  values.advise(managed_advice::unset_accessed_by, memory_location::device(0));
  EXPECT_FALSE(accessed_by());
}

TEST_F(ManagedOperations, MemoryThatIsNotManagedIsRefusedNamingWhatItIs) {
  device_memory_resource device_memory(0);
  pinned_memory_resource pinned;
  buffer<float> on_device(device_memory, 1024, *stream_);
  buffer<float> page_locked(pinned, 1024, *stream_);
  std::vector<float> pageable(1024);
  stream_->synchronize();
  expect_invalid_argument([&] { managed_->prefetch_to_device(on_device.data(), 4096, 0, *stream_); },
                          "device memory");
  expect_invalid_argument([&] { managed_->prefetch_to_host(page_locked.data(), 4096, *stream_); },
                          "pinned host memory");
  expect_invalid_argument(
      [&] { managed_->advise(pageable.data(), 4096, managed_advice::set_read_mostly, memory_location::host()); },
      "pageable host memory");
  expect_invalid_argument([&] { on_device.prefetch_to_device(0, *stream_); }, "holds device memory");
  expect_invalid_argument([&] { page_locked.prefetch_to_host(*stream_); }, "holds pinned memory");

  // A range that starts in managed memory and runs past its end.
  buffer<float> unified(*managed_, 1024, *stream_);
  stream_->synchronize();
  expect_invalid_argument([&] { managed_->prefetch_to_host(unified.data(), std::size_t{1} << 40, *stream_); },
                          "not managed memory");
}

TEST_F(ManagedOperations, DeviceOutOfRangeThrowsNamingTheCount) {
  buffer<float> values(*managed_, 1024, *stream_);
  const int count = device::count();
  expect_invalid_argument([&] { values.prefetch_to_device(count, *stream_); }, std::to_string(count) + " CUDA device");
  expect_invalid_argument([&] { values.advise(managed_advice::set_accessed_by, memory_location::device(-1)); },
                          "device ordinal -1");
  values.close(*stream_);
  stream_->synchronize();
}

TEST_F(ManagedOperations, EmptyBuffersHaveNothingToMove) {
  buffer<float> none(*managed_, 0, *stream_);
  none.prefetch_to_device(0, *stream_);
  none.prefetch_to_host(*stream_);
  none.advise(managed_advice::set_read_mostly);
  stream_->synchronize();
}

}  // namespace
}  // namespace cudapmr::test
