// SPDX-License-Identifier: Apache-2.0
#pragma once
// Reserving bytes against a capacity from many threads at once.

#include <atomic>
#include <cstddef>

namespace cudapmr::detail {

/// Adds `bytes` to `used` unless the sum would pass `capacity`, so that
/// concurrent callers never overshoot. Returns false, with the usage it saw in
/// `used_seen`, when it refuses.
[[nodiscard]] inline bool try_reserve(std::atomic<std::size_t>& used, std::size_t bytes, std::size_t capacity,
                                      std::size_t& used_seen) noexcept {
  used_seen = used.load(std::memory_order_relaxed);
  do {
    if (bytes > capacity - used_seen) return false;
  } while (!used.compare_exchange_weak(used_seen, used_seen + bytes, std::memory_order_relaxed));
  return true;
}

}  // namespace cudapmr::detail
