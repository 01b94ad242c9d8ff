#pragma once
// Size classes of the caches: 256 bytes, then four classes per power of two,
// so a cached block wastes at most a fifth of itself.

#include <bit>
#include <cstddef>

namespace cudapmr::detail {

inline constexpr std::size_t smallest_size_class = 256;
/// Classes reach 2^40 bytes; the caches are further capped by their options.
inline constexpr std::size_t size_class_count = 1 + (40 - 8) * 4;

/// The class of a request: the smallest class at least `bytes` large.
/// \pre bytes <= 2^40.
[[nodiscard]] constexpr std::size_t size_class_of(std::size_t bytes) noexcept {
  if (bytes <= smallest_size_class) return 0;
  const auto octave = static_cast<std::size_t>(std::bit_width(bytes - 1) - 1);  // 2^octave < bytes <= 2^(octave+1)
  const std::size_t step = std::size_t{1} << (octave - 2);
  const std::size_t quarters = (bytes + step - 1) >> (octave - 2);  // 5..8
  return 1 + (octave - 8) * 4 + (quarters - 5);
}

/// The bytes of a class: what the cache asks upstream for.
[[nodiscard]] constexpr std::size_t size_class_bytes(std::size_t size_class) noexcept {
  if (size_class == 0) return smallest_size_class;
  const std::size_t octave = 8 + (size_class - 1) / 4;
  const std::size_t quarters = 5 + (size_class - 1) % 4;
  return quarters << (octave - 2);
}

}  // namespace cudapmr::detail
