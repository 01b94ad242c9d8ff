// SPDX-License-Identifier: Apache-2.0
#pragma once
// A small, stable number for the calling thread, shared by the adaptors' logs and reports.

#include <cstdint>

namespace cudapmr::detail {

/// 1 for the first thread that asks, 2 for the next, and so on; the same
/// number for the life of the thread. Unlike std::thread::id it prints the
/// same way everywhere and replays can key on it.
[[nodiscard]] std::uint64_t thread_ordinal() noexcept;

}  // namespace cudapmr::detail
