// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file snapshot_export.hpp
/// Memory snapshots as files other tools open: cudapmr's JSON, PyTorch's
/// memory snapshot pickle (`torch.cuda.memory._snapshot()`'s format, read by
/// `python -m torch.cuda._memory_viz` and the memory_viz page), and a Chrome
/// trace of counter tracks that Perfetto opens.

#include "cudapmr/memory_snapshot.hpp"

#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace cudapmr {

/// cudapmr's JSON snapshot of one or more stacks (format in docs/observability.md):
/// `{"format": "cudapmr-memory-snapshot", "version": 1, "stacks": [...]}`.
[[nodiscard]] std::string to_json(std::span<const memory_snapshot> stacks);
/// As above, of one stack.
[[nodiscard]] std::string to_json(const memory_snapshot& stack);

/// PyTorch's memory snapshot (a pickle, protocol 2) of one or more stacks: a
/// dict with "segments" (one per live block, each its own segment) and
/// "device_traces" (one list per device, events of every stack of that
/// device in time order: "segment_alloc", "alloc", "free_requested",
/// "free_completed", "segment_free", "oom"), plus "external_annotations".
/// Other memory (pinned, managed, pageable) goes in the list after the last
/// device's. A free is complete when requested: stream order allows
/// reuse at once.
[[nodiscard]] std::string to_pytorch_pickle(std::span<const memory_snapshot> stacks);
/// As above, of one stack.
[[nodiscard]] std::string to_pytorch_pickle(const memory_snapshot& stack);

/// A Chrome trace (JSON, `traceEvents`): per stack, a counter track of the
/// live bytes and one per stream, the annotations as slices on their
/// threads, and each out-of-memory as an instant event.
[[nodiscard]] std::string to_chrome_trace(std::span<const memory_snapshot> stacks);
/// As above, of one stack.
[[nodiscard]] std::string to_chrome_trace(const memory_snapshot& stack);

/// Writes `contents` to a new file at `path` (replacing one there).
/// \throws std::invalid_argument naming the path and the system's reason.
void write_file(const std::filesystem::path& path, std::string_view contents);

}  // namespace cudapmr
