// SPDX-License-Identifier: Apache-2.0
#pragma once
// Call stacks of allocations, captured for the tracking and history adaptors
// and printed in their reports.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace cudapmr::detail {

/// Return addresses of the caller, innermost first, leaving out the
/// `skipped_frames` innermost ones (this function and the adaptor's own) and
/// keeping at most `max_frames`; empty where glibc's `backtrace` is missing.
[[gnu::noinline]] std::vector<void*> capture_call_stack(int skipped_frames, int max_frames);

/// One line per frame, each starting with `indent`: glibc's
/// "binary(function+offset) [address]" (function names need `-rdynamic`).
[[nodiscard]] std::string symbolize(const std::vector<void*>& call_stack, std::string_view indent);

/// The frame's symbol as glibc gives it, or its address where there is none.
[[nodiscard]] std::string symbolize_frame(void* frame);

}  // namespace cudapmr::detail
