// SPDX-License-Identifier: Apache-2.0
#pragma once
// The stress run: threads sharing streams make random allocations, frees,
// copies, fills and kernels over every resource and adaptor stack, each live
// allocation stamped and checked before it is freed; at the end every counter
// must balance and every pool must be back where it started.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace stress {

struct options {
  /// Random operations in all, shared among the threads.
  std::uint64_t operations = 1'000'000;
  unsigned threads = 16;
  unsigned streams = 4;
  /// The largest allocation; sizes are drawn log-uniformly from 1 byte up.
  std::size_t max_bytes = std::size_t{1} << 20;
  /// The most allocations one thread holds at once.
  std::size_t max_live = 64;
  std::uint64_t seed = 1;
  /// Only the host resource and adaptors over it: no CUDA call at all.
  bool host_only = false;
  /// The targets to draw from, by name ("device", "pinned+caching", ...); empty: all.
  std::vector<std::string> targets;
  /// Where to write every allocation, free and operation of the run, with its
  /// thread, stream and time, to match a sanitizer's report to a block's
  /// history; empty: no trace.
  std::string trace_path;
  /// Called every quarter second while the threads run, with the operations done and in all.
  std::function<void(std::uint64_t done, std::uint64_t total)> on_progress;
};

/// What happened on one resource or adaptor stack.
struct target_report {
  std::string name;
  std::uint64_t allocations = 0;
  std::uint64_t bytes_allocated = 0;
  std::uint64_t frees = 0;
  std::uint64_t copies = 0;
  std::uint64_t fills = 0;
  std::uint64_t kernels = 0;
  /// Graphs captured over the target (allocate, stamp, check, free), each launched twice.
  std::uint64_t graphs = 0;
  /// Bytes found different from their pattern when checked before a free.
  std::uint64_t mismatches = 0;
};

struct report {
  std::vector<target_report> targets;
  std::uint64_t operations = 0;
  /// Frees of what was still live when the operations were done.
  std::uint64_t final_frees = 0;
  double seconds = 0;
  /// Every failed check: a mismatch, a bad alignment, an unbalanced counter,
  /// memory left in a pool, an error thrown; the first few word for word.
  std::vector<std::string> failures;
  /// How many checks failed; 0 when all is well.
  std::size_t failure_count = 0;
};

/// Runs the stress test. \throws cudapmr::cuda_error where no device exists
/// (unless host_only); std::invalid_argument for unusable options, such as a
/// target name the run does not have.
[[nodiscard]] report run(const options& chosen);

}  // namespace stress
