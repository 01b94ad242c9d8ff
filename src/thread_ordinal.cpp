// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/detail/thread_ordinal.hpp"

#include <atomic>

namespace cudapmr::detail {

std::uint64_t thread_ordinal() noexcept {
  static std::atomic<std::uint64_t> next{1};
  thread_local const std::uint64_t ordinal = next.fetch_add(1, std::memory_order_relaxed);
  return ordinal;
}

}  // namespace cudapmr::detail
