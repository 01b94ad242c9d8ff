// SPDX-License-Identifier: Apache-2.0
#pragma once
// Deadlines for waits given as a timeout: saturated, so that
// milliseconds::max() ("wait for ever") does not overflow the clock's
// nanoseconds into a deadline already past.

#include <chrono>

namespace cudapmr::detail {

/// Now plus `timeout`: now for a timeout of zero or less, the clock's last
/// time point where the sum would pass it.
[[nodiscard]] inline std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout) noexcept {
  using clock = std::chrono::steady_clock;
  const clock::time_point now = clock::now();
  if (timeout <= std::chrono::milliseconds::zero()) return now;
  const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(clock::time_point::max() - now);
  return timeout >= room ? clock::time_point::max() : now + timeout;
}

}  // namespace cudapmr::detail
