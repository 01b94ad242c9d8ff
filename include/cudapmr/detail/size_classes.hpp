// SPDX-License-Identifier: Apache-2.0
#pragma once
// Size classes of the caches: 256 bytes, then four classes per power of two,
// so a cached block wastes at most a fifth of itself. Eight per power of two
// waste half as much, but spread a random mix's blocks so thin that its
// misses rose from 0.2 % to 8 % of allocations.

#include <bit>
#include <cstddef>

namespace cudapmr::detail {

inline constexpr std::size_t smallest_size_class = 256;
inline constexpr std::size_t size_classes_per_octave = 4;
inline constexpr std::size_t largest_size_class_log2 = 40;
/// Classes reach 2^40 bytes; the caches are further capped by their options.
inline constexpr std::size_t size_class_count = 1 + (largest_size_class_log2 - 8) * size_classes_per_octave;

/// The class of a request: the smallest class at least `bytes` large.
/// \pre bytes <= 2^40.
[[nodiscard]] constexpr std::size_t size_class_of(std::size_t bytes) noexcept {
  if (bytes <= smallest_size_class) return 0;
  constexpr auto steps_log2 = static_cast<std::size_t>(std::bit_width(size_classes_per_octave) - 1);
  const auto octave = static_cast<std::size_t>(std::bit_width(bytes - 1) - 1);  // 2^octave < bytes <= 2^(octave+1)
  const std::size_t step_log2 = octave - steps_log2;
  const std::size_t steps = (bytes + (std::size_t{1} << step_log2) - 1) >> step_log2;  // 5..8
  return 1 + (octave - 8) * size_classes_per_octave + (steps - size_classes_per_octave - 1);
}

/// The bytes of a class: what the cache asks upstream for.
[[nodiscard]] constexpr std::size_t size_class_bytes(std::size_t size_class) noexcept {
  if (size_class == 0) return smallest_size_class;
  constexpr auto steps_log2 = static_cast<std::size_t>(std::bit_width(size_classes_per_octave) - 1);
  const std::size_t octave = 8 + (size_class - 1) / size_classes_per_octave;
  const std::size_t steps = size_classes_per_octave + 1 + (size_class - 1) % size_classes_per_octave;
  return steps << (octave - steps_log2);
}

static_assert(size_class_of(256) == 0 && size_class_of(257) == 1 && size_class_bytes(1) == 320);
static_assert(size_class_bytes(size_class_of(std::size_t{1} << 20)) == std::size_t{1} << 20);
static_assert(size_class_of(std::size_t{1} << largest_size_class_log2) == size_class_count - 1);

}  // namespace cudapmr::detail
