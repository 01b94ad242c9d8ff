// SPDX-License-Identifier: Apache-2.0
// The free-range bookkeeping under virtual_memory_resource: first fit by
// address, merges on both sides, aligned placement, exhaustion. Host-only.
#include <cudapmr/detail/address_ranges.hpp>
#include <cudapmr/error.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace cudapmr::detail {
namespace {

constexpr std::size_t page = std::size_t{2} << 20;  // the H200's granularity
constexpr std::uintptr_t base = std::uintptr_t{0x7f00} << 32;

TEST(AddressRanges, TakesTheLowestRangeThatFits) {
  address_ranges ranges(base, 16 * page, "test reservation");
  EXPECT_EQ(ranges.take(page, page), base);
  EXPECT_EQ(ranges.take(2 * page, page), base + page);
  EXPECT_EQ(ranges.take(page, page), base + 3 * page);
  EXPECT_EQ(ranges.free_bytes(), 12 * page);
  // A hole of two pages at base + page: a one-page request fills it from its start.
  ranges.give_back(base + page, 2 * page);
  EXPECT_EQ(ranges.take(page, page), base + page);
  // Three pages do not fit the one-page hole left: they go past the last taken range.
  EXPECT_EQ(ranges.take(3 * page, page), base + 4 * page);
  EXPECT_EQ(ranges.take(page, page), base + 2 * page) << "the remaining hole is still the lowest fit";
}

TEST(AddressRanges, AGivenBackRangeMergesWithBothNeighbours) {
  address_ranges ranges(base, 8 * page, "test reservation");
  const std::uintptr_t first = ranges.take(page, page);
  const std::uintptr_t middle = ranges.take(page, page);
  const std::uintptr_t last = ranges.take(page, page);
  EXPECT_EQ(ranges.free_range_count(), 1u);  // the tail
  ranges.give_back(first, page);
  EXPECT_EQ(ranges.free_range_count(), 2u);
  ranges.give_back(last, page);  // joins the tail after it
  EXPECT_EQ(ranges.free_range_count(), 2u);
  EXPECT_EQ(ranges.largest_free_range(), 6 * page);
  ranges.give_back(middle, page);  // joins both: one range again
  EXPECT_EQ(ranges.free_range_count(), 1u);
  EXPECT_EQ(ranges.largest_free_range(), 8 * page);
  EXPECT_EQ(ranges.free_bytes(), 8 * page);
  EXPECT_EQ(ranges.take(8 * page, page), base) << "the whole reservation fits again";
}

TEST(AddressRanges, MergesWithThePreviousRangeOnly) {
  address_ranges ranges(base, 4 * page, "test reservation");
  const std::uintptr_t first = ranges.take(page, page);
  const std::uintptr_t second = ranges.take(page, page);
  static_cast<void>(ranges.take(2 * page, page));  // the rest: nothing free after `second`
  ranges.give_back(first, page);
  ranges.give_back(second, page);
  EXPECT_EQ(ranges.free_range_count(), 1u);
  EXPECT_EQ(ranges.largest_free_range(), 2 * page);
}

TEST(AddressRanges, PlacesLargerAlignmentsOnTheirBoundaryAndKeepsTheLeadFree) {
  const std::size_t alignment = 8 * page;
  // A base that is not a multiple of the alignment.
  address_ranges ranges(base + page, 32 * page, "test reservation");
  const std::uintptr_t aligned = ranges.take(page, alignment);
  EXPECT_EQ(aligned % alignment, 0u);
  EXPECT_EQ(aligned, base + alignment) << "the lowest aligned address that fits";
  EXPECT_EQ(ranges.free_bytes(), 31 * page);
  // The seven pages in front of it are still free and handed out first.
  EXPECT_EQ(ranges.take(7 * page, page), base + page);
  EXPECT_EQ(ranges.free_range_count(), 1u);
}

TEST(AddressRanges, AnAlignedRequestSkipsHolesItCannotUseAligned) {
  address_ranges ranges(base, 32 * page, "test reservation");
  const std::uintptr_t low = ranges.take(4 * page, page);
  static_cast<void>(ranges.take(page, page));
  ranges.give_back(low + page, 2 * page);  // a hole of two pages at base + page, unaligned to 4 pages
  const std::uintptr_t aligned = ranges.take(2 * page, 4 * page);
  EXPECT_EQ(aligned % (4 * page), 0u);
  EXPECT_EQ(aligned, base + 8 * page);
  EXPECT_EQ(ranges.take(2 * page, page), base + page) << "the skipped hole is still free";
}

TEST(AddressRanges, ExhaustionThrowsOutOfMemoryNamingTheRequestAndWhatIsFree) {
  address_ranges ranges(base, 4 * page, "virtual_memory_resource (device 0)");
  static_cast<void>(ranges.take(page, page));
  const std::uintptr_t hole = ranges.take(page, page);
  static_cast<void>(ranges.take(page, page));
  ranges.give_back(hole, page);  // two free pages, not adjacent
  EXPECT_FALSE(ranges.try_take(2 * page, page).has_value());
  try {
    static_cast<void>(ranges.take(2 * page, page));
    ADD_FAILURE() << "a request larger than any free range was granted";
  } catch (const out_of_memory& error) {
    const std::string message = error.what();
    EXPECT_EQ(error.requested_bytes(), 2 * page);
    EXPECT_NE(message.find("virtual_memory_resource (device 0)"), std::string::npos) << message;
    EXPECT_NE(message.find(std::to_string(2 * page)), std::string::npos) << message;
    EXPECT_NE(message.find(std::to_string(4 * page) + " bytes"), std::string::npos) << message;
    EXPECT_NE(message.find("largest free range " + std::to_string(page)), std::string::npos) << message;
  }
  EXPECT_EQ(ranges.free_bytes(), 2 * page) << "a refusal takes nothing";
  EXPECT_THROW(static_cast<void>(ranges.take(5 * page, page)), out_of_memory);
  EXPECT_EQ(ranges.take(page, page), base + page) << "the ranges keep working after a refusal";
}

TEST(AddressRanges, RefusesARangeGivenBackTwiceOrFromOutside) {
  address_ranges ranges(base, 4 * page, "test reservation");
  const std::uintptr_t taken = ranges.take(2 * page, page);
  ranges.give_back(taken, 2 * page);
  EXPECT_THROW(ranges.give_back(taken, 2 * page), std::invalid_argument);
  const std::uintptr_t again = ranges.take(page, page);
  EXPECT_THROW(ranges.give_back(again, 2 * page), std::invalid_argument) << "the second page is free";
  EXPECT_THROW(ranges.give_back(base - page, page), std::invalid_argument);
  EXPECT_THROW(ranges.give_back(base + 4 * page, page), std::invalid_argument);
  EXPECT_EQ(ranges.free_bytes(), 3 * page) << "a refused give-back changes nothing";
}

TEST(AddressRanges, RandomSequencesNeverOverlapAndRestoreTheWholeReservation) {
  constexpr std::size_t pages = 512;
  address_ranges ranges(base, pages * page, "test reservation");
  std::mt19937_64 random(7);
  std::map<std::uintptr_t, std::size_t> live;  // start -> bytes
  std::size_t live_bytes = 0;
  for (int step = 0; step < 20000; ++step) {
    if (live.empty() || random() % 3 != 0) {
      const std::size_t bytes = (1 + random() % 16) * page;
      const std::size_t alignment = page << (random() % 4);
      const std::optional<std::uintptr_t> taken = ranges.try_take(bytes, alignment);
      if (!taken) continue;
      ASSERT_EQ(*taken % alignment, 0u);
      ASSERT_GE(*taken, base);
      ASSERT_LE(*taken + bytes, base + pages * page);
      const auto next = live.lower_bound(*taken);
      ASSERT_TRUE(next == live.end() || next->first >= *taken + bytes) << "overlaps the next live range";
      ASSERT_TRUE(next == live.begin() || std::prev(next)->first + std::prev(next)->second <= *taken)
          << "overlaps the previous live range";
      live.emplace(*taken, bytes);
      live_bytes += bytes;
    } else {
      auto victim = live.begin();
      std::advance(victim, static_cast<std::ptrdiff_t>(random() % live.size()));
      ranges.give_back(victim->first, victim->second);
      live_bytes -= victim->second;
      live.erase(victim);
    }
    ASSERT_EQ(ranges.free_bytes() + live_bytes, pages * page);
  }
  for (const auto& [start, bytes] : live) ranges.give_back(start, bytes);
  EXPECT_EQ(ranges.free_range_count(), 1u) << "every neighbour merged again";
  EXPECT_EQ(ranges.largest_free_range(), pages * page);
}

}  // namespace
}  // namespace cudapmr::detail
