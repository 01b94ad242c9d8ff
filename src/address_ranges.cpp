// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/detail/address_ranges.hpp"

#include "cudapmr/error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <utility>

namespace cudapmr::detail {

address_ranges::address_ranges(std::uintptr_t base, std::size_t bytes, std::string owner)
    : base_(base), bytes_(bytes), owner_(std::move(owner)), free_bytes_(bytes) {
  if (bytes > std::numeric_limits<std::uintptr_t>::max() - base)
    throw std::invalid_argument(fmt::format("address_ranges: {} bytes at {:#x} wrap around the address space", bytes, base));
  if (bytes != 0) free_.emplace(base, bytes);
}

std::optional<std::uintptr_t> address_ranges::try_take(std::size_t bytes, std::size_t alignment) {
  if (bytes == 0 || bytes > free_bytes_) return std::nullopt;
  for (auto range = free_.begin(); range != free_.end(); ++range) {
    const auto [start, length] = *range;
    const std::uintptr_t aligned = (start + alignment - 1) & ~(std::uintptr_t{alignment} - 1);
    const std::size_t lead = aligned - start;  // stays free in front of the taken part
    if (aligned < start || lead > length || length - lead < bytes) continue;
    const std::size_t tail = length - lead - bytes;
    if (tail != 0) free_.emplace_hint(std::next(range), aligned + bytes, tail);
    if (lead != 0) range->second = lead;
    else free_.erase(range);
    free_bytes_ -= bytes;
    return aligned;
  }
  return std::nullopt;
}

std::uintptr_t address_ranges::take(std::size_t bytes, std::size_t alignment) {
  if (const std::optional<std::uintptr_t> address = try_take(bytes, alignment)) return *address;
  throw out_of_memory(bytes, alignment, owner_,
                      fmt::format("no free range of the reserved {} bytes at {:#x} fits: {} bytes free, the largest "
                                  "free range {} bytes",
                                  bytes_, base_, free_bytes_, largest_free_range()));
}

void address_ranges::give_back(std::uintptr_t address, std::size_t bytes) {
  if (bytes == 0) return;
  const auto refuse = [&](const char* why) {
    throw std::invalid_argument(fmt::format("{}: {} bytes at {:#x} given back {} (reservation: {} bytes at {:#x})",
                                            owner_, bytes, address, why, bytes_, base_));
  };
  if (address < base_ || address - base_ > bytes_ || bytes > bytes_ - (address - base_))
    refuse("lie outside the reservation");
  const std::uintptr_t end = address + bytes;
  auto next = free_.lower_bound(address);
  if (next != free_.end() && next->first < end) refuse("overlap free space");
  auto previous = next == free_.begin() ? free_.end() : std::prev(next);
  if (previous != free_.end() && previous->first + previous->second > address) refuse("overlap free space");

  const bool joins_previous = previous != free_.end() && previous->first + previous->second == address;
  const bool joins_next = next != free_.end() && next->first == end;
  if (joins_previous) {
    previous->second += bytes;
    if (joins_next) {
      previous->second += next->second;
      free_.erase(next);
    }
  } else if (joins_next) {
    free_.emplace_hint(next, address, bytes + next->second);  // first, so that a throw changes nothing
    free_.erase(next);
  } else {
    free_.emplace_hint(next, address, bytes);
  }
  free_bytes_ += bytes;
}

std::size_t address_ranges::largest_free_range() const noexcept {
  std::size_t largest = 0;
  for (const auto& [start, length] : free_) largest = std::max(largest, length);
  return largest;
}

}  // namespace cudapmr::detail
