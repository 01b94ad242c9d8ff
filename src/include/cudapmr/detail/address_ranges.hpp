// SPDX-License-Identifier: Apache-2.0
#pragma once
// The free parts of one reserved address range, handed out first fit by
// address: the lowest range that fits is taken, and a range given back merges
// with free neighbours on both sides, so that what is in use stays packed at
// the low end and freed ranges join again. Host-only bookkeeping; not thread-safe.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace cudapmr::detail {

class address_ranges {
 public:
  /// [base, base + bytes), all free; `owner` names the reservation's owner in refusals.
  /// \throws std::invalid_argument where the range wraps around the address space.
  address_ranges(std::uintptr_t base, std::size_t bytes, std::string owner);

  /// The lowest address, a multiple of `alignment` (a power of two), starting
  /// `bytes` (> 0) of free space, now taken; none where no free range fits.
  [[nodiscard]] std::optional<std::uintptr_t> try_take(std::size_t bytes, std::size_t alignment);
  /// As try_take. \throws out_of_memory naming the request, the owner, the
  /// reservation, the free bytes and the largest free range where none fits.
  [[nodiscard]] std::uintptr_t take(std::size_t bytes, std::size_t alignment);
  /// Frees [address, address + bytes), which try_take or take handed out (or
  /// a part of it), merging it with free neighbours.
  /// \throws std::invalid_argument where the range lies outside the
  ///   reservation or overlaps free space (a range given back twice).
  void give_back(std::uintptr_t address, std::size_t bytes);

  [[nodiscard]] std::uintptr_t base() const noexcept { return base_; }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }
  [[nodiscard]] std::size_t free_bytes() const noexcept { return free_bytes_; }
  /// How many separate free ranges there are (1 for a wholly free reservation).
  [[nodiscard]] std::size_t free_range_count() const noexcept { return free_.size(); }
  /// The largest free range, ignoring alignment.
  [[nodiscard]] std::size_t largest_free_range() const noexcept;

 private:
  std::uintptr_t base_;
  std::size_t bytes_;
  std::string owner_;
  std::size_t free_bytes_;
  std::map<std::uintptr_t, std::size_t> free_;  // start -> length, no two adjacent or overlapping
};

}  // namespace cudapmr::detail
