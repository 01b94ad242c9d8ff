// SPDX-License-Identifier: Apache-2.0
// buffer<T> over every resource.
#include "support/resource_cases.hpp"

#include <cudapmr/buffer.hpp>

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace cudapmr::test {
namespace {

template <class Case>
class Buffer : public resource_fixture<Case> {
 protected:
  /// The buffer's contents, read through a host copy.
  template <class T>
  std::vector<T> read(const buffer<T>& source) {
    std::vector<T> values(source.size());
    source.copy_to(std::span<T>(values), this->test_stream());
    this->synchronize();
    return values;
  }
};
TYPED_TEST_SUITE(Buffer, all_resource_cases);

struct twelve_bytes {
  std::int32_t a, b, c;
  friend bool operator==(const twelve_bytes&, const twelve_bytes&) = default;
};

struct eighty_bytes {
  std::array<std::uint64_t, 10> words;
  friend bool operator==(const eighty_bytes&, const eighty_bytes&) = default;
};

TYPED_TEST(Buffer, HoldsCountElementsFromItsResource) {
  buffer<double> values(this->resource(), 1000, this->test_stream());
  EXPECT_EQ(values.size(), 1000u);
  EXPECT_EQ(values.size_bytes(), 8000u);
  EXPECT_FALSE(values.empty());
  EXPECT_TRUE(values.is_open());
  EXPECT_NE(values.data(), nullptr);
  EXPECT_EQ(values.span().data(), values.data());
  EXPECT_EQ(values.span().size(), 1000u);
  EXPECT_EQ(values.resource(), &this->resource());
  EXPECT_EQ(values.stream(), this->test_stream());
}

TYPED_TEST(Buffer, RoundTripsThroughHostMemory) {
  std::vector<std::uint32_t> input(100003);
  std::iota(input.begin(), input.end(), 11u);
  buffer<std::uint32_t> values(this->resource(), input.size(), this->test_stream());
  values.copy_from(std::span<const std::uint32_t>(input), this->test_stream());
  EXPECT_EQ(this->read(values), input);
}

TYPED_TEST(Buffer, CopiesBetweenBuffers) {
  std::vector<std::uint32_t> input(4096);
  std::iota(input.begin(), input.end(), 3u);
  buffer<std::uint32_t> source(this->resource(), input.size(), this->test_stream());
  buffer<std::uint32_t> destination(this->resource(), input.size(), this->test_stream());
  source.copy_from(std::span<const std::uint32_t>(input), this->test_stream());
  source.copy_to(destination, this->test_stream());
  EXPECT_EQ(this->read(destination), input);
  buffer<std::uint32_t> third(this->resource(), input.size(), this->test_stream());
  third.copy_from(destination, this->test_stream());
  EXPECT_EQ(this->read(third), input);
}

TYPED_TEST(Buffer, CopiesToAndFromEveryOtherKind) {
  CUDAPMR_REQUIRE_GPU();
  std::vector<std::uint32_t> input(65536);
  std::iota(input.begin(), input.end(), 1u);
  buffer<std::uint32_t> source(this->resource(), input.size(), this->test_stream());
  source.copy_from(std::span<const std::uint32_t>(input), this->test_stream());
  device_memory_resource device_memory(0);
  pinned_memory_resource pinned;
  managed_memory_resource managed;
  host_memory_resource pageable;
  for (stream_ordered_resource* other :
       {static_cast<stream_ordered_resource*>(&device_memory), static_cast<stream_ordered_resource*>(&pinned),
        static_cast<stream_ordered_resource*>(&managed), static_cast<stream_ordered_resource*>(&pageable)}) {
    buffer<std::uint32_t> middle(*other, input.size(), this->test_stream());
    buffer<std::uint32_t> back(this->resource(), input.size(), this->test_stream());
    source.copy_to(middle, this->test_stream());
    back.copy_from(middle, this->test_stream());
    EXPECT_EQ(this->read(back), input) << "through " << other->description();
  }
}

TYPED_TEST(Buffer, FillSetsEveryElementForEveryElementSize) {
  buffer<std::uint8_t> bytes(this->resource(), 1001, this->test_stream());
  bytes.fill(0xab, this->test_stream());
  EXPECT_EQ(this->read(bytes), std::vector<std::uint8_t>(1001, 0xab));

  buffer<std::uint32_t> words(this->resource(), 70001, this->test_stream());
  words.fill(0x12345678u, this->test_stream());
  EXPECT_EQ(this->read(words), std::vector<std::uint32_t>(70001, 0x12345678u));

  buffer<double> doubles(this->resource(), 513, this->test_stream());
  doubles.fill(-2.75, this->test_stream());
  EXPECT_EQ(this->read(doubles), std::vector<double>(513, -2.75));

  const twelve_bytes odd{1, -2, 3};
  buffer<twelve_bytes> odds(this->resource(), 777, this->test_stream());
  odds.fill(odd, this->test_stream());
  EXPECT_EQ(this->read(odds), std::vector<twelve_bytes>(777, odd));

  eighty_bytes large{};
  std::iota(large.words.begin(), large.words.end(), std::uint64_t{40});
  buffer<eighty_bytes> larges(this->resource(), 1025, this->test_stream());
  larges.fill(large, this->test_stream());
  EXPECT_EQ(this->read(larges), std::vector<eighty_bytes>(1025, large));
}

TYPED_TEST(Buffer, FillReportsOnlyItsOwnErrorsAndLeavesOthersPending) {
  // An earlier call's error, not yet collected by its owner.
  cudaDeviceProp properties{};
  const cudaError_t earlier = cudaGetDeviceProperties(&properties, 1 << 20);
  ASSERT_NE(earlier, cudaSuccess);
  buffer<std::uint32_t> words(this->resource(), 4097, this->test_stream());
  EXPECT_NO_THROW(words.fill(7u, this->test_stream()));
  EXPECT_EQ(cudaGetLastError(), earlier) << "fill collected an error that was not its own";
  EXPECT_EQ(this->read(words), std::vector<std::uint32_t>(4097, 7u));
}

TYPED_TEST(Buffer, SizeMismatchThrowsNamingBothSizes) {
  buffer<float> ten(this->resource(), 10, this->test_stream());
  buffer<float> twelve(this->resource(), 12, this->test_stream());
  std::vector<float> eleven(11);
  auto expect_sizes = [](auto&& copy, const std::string& first, const std::string& second) {
    try {
      copy();
      ADD_FAILURE() << "a copy of mismatched sizes was accepted";
    } catch (const std::invalid_argument& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find(first), std::string::npos) << message;
      EXPECT_NE(message.find(second), std::string::npos) << message;
    }
  };
  expect_sizes([&] { ten.copy_from(twelve, this->test_stream()); }, "10 elements", "12");
  expect_sizes([&] { ten.copy_to(twelve, this->test_stream()); }, "12 elements", "10");
  expect_sizes([&] { ten.copy_from(std::span<const float>(eleven), this->test_stream()); }, "10 elements", "11");
  expect_sizes([&] { twelve.copy_to(std::span<float>(eleven), this->test_stream()); }, "11 elements", "12");
}

TYPED_TEST(Buffer, ByteCountOverflowThrows) {
  const std::size_t count = std::numeric_limits<std::size_t>::max() / 4;
  try {
    buffer<double> impossible(this->resource(), count, this->test_stream());
    ADD_FAILURE() << "an overflowing byte count was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find(std::to_string(count)), std::string::npos) << error.what();
  }
}

TYPED_TEST(Buffer, CloseIsStreamOrderedAndIdempotent) {
  buffer<int> values(this->resource(), 256, this->test_stream());
  values.close(this->test_stream());
  EXPECT_FALSE(values.is_open());
  EXPECT_TRUE(values.empty());
  EXPECT_EQ(values.data(), nullptr);
  EXPECT_EQ(values.resource(), nullptr);
  values.close(this->test_stream());
  values.close();
  this->synchronize();
}

TYPED_TEST(Buffer, MovedFromBufferIsEmptyAndTheMemoryMovesWithIt) {
  buffer<int> original(this->resource(), 64, this->test_stream());
  int* const data = original.data();
  buffer<int> moved(std::move(original));
  EXPECT_EQ(moved.data(), data);
  EXPECT_EQ(moved.size(), 64u);
  EXPECT_FALSE(original.is_open());  // NOLINT(bugprone-use-after-move): the moved-from state is the contract
  EXPECT_TRUE(original.empty());
  buffer<int> assigned(this->resource(), 8, this->test_stream());
  assigned = std::move(moved);
  EXPECT_EQ(assigned.data(), data);
  EXPECT_EQ(assigned.size(), 64u);
}

TYPED_TEST(Buffer, ClosedOrMovedFromBufferRefusesCopiesAndFills) {
  buffer<int> closed(this->resource(), 16, this->test_stream());
  closed.close();
  buffer<int> open(this->resource(), 16, this->test_stream());
  std::vector<int> host(16);
  for (auto&& operation : std::vector<std::function<void()>>{
           [&] { closed.fill(1, this->test_stream()); },
           [&] { closed.copy_from(std::span<const int>(host), this->test_stream()); },
           [&] { closed.copy_to(std::span<int>(host), this->test_stream()); },
           [&] { closed.copy_to(open, this->test_stream()); },
           [&] { open.copy_from(closed, this->test_stream()); }}) {
    try {
      operation();
      ADD_FAILURE() << "a closed buffer was used";
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find("closed or moved-from"), std::string::npos) << error.what();
    }
  }
}

TYPED_TEST(Buffer, ZeroElementsRoundTrip) {
  buffer<float> none(this->resource(), 0, this->test_stream());
  EXPECT_TRUE(none.empty());
  EXPECT_TRUE(none.is_open());
  none.fill(1.0f, this->test_stream());
  buffer<float> other(this->resource(), 0, this->test_stream());
  none.copy_to(other, this->test_stream());
  none.close();
  this->synchronize();
}

}  // namespace
}  // namespace cudapmr::test
