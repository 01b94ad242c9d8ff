// SPDX-License-Identifier: Apache-2.0
#pragma once
// Replaying logging_adaptor logs against any resource, and recording a
// synthetic workload to replay: the library behind the `replay` program,
// which the tests call directly.

#include <cudapmr/adaptors/logging_adaptor.hpp>
#include <cudapmr/adaptors/statistics_adaptor.hpp>
#include <cudapmr/stream_ordered_resource.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <span>
#include <string>
#include <vector>

namespace replay {

/// One line of a logging_adaptor log.
struct event {
  std::uint64_t sequence = 0;
  std::uint64_t time_ns = 0;
  std::uint64_t thread = 0;
  cudapmr::log_action action = cudapmr::log_action::allocate;
  std::uintptr_t pointer = 0;
  std::size_t bytes = 0;
  std::size_t alignment = 0;
  std::uintptr_t stream = 0;
};

/// Reads a log written by logging_adaptor, sorted by sequence.
/// \throws std::invalid_argument naming the line and what is wrong with it.
[[nodiscard]] std::vector<event> read_log(std::istream& in);
/// \throws std::invalid_argument naming the file when it cannot be read, or as above.
[[nodiscard]] std::vector<event> read_log(const std::filesystem::path& path);

/// The most bytes outstanding at once when the events run in order: the
/// peak a replay reproduces when nothing is refused.
[[nodiscard]] std::size_t peak_bytes(std::span<const event> events);

/// What a replay did.
struct result {
  std::size_t events = 0;
  std::size_t threads = 0;
  std::size_t streams = 0;
  /// Counted over the replay target.
  cudapmr::resource_statistics statistics;
  /// Allocations refused during the replay, and those the log records as refused.
  std::size_t failures = 0;
  std::size_t logged_failures = 0;
  /// Frees of pointers the log never allocated (a log started mid-run); skipped.
  std::size_t unmatched_frees = 0;
  /// Allocations the log never freed; the replay frees them at the end.
  std::size_t left_outstanding = 0;
  /// The first refusal's message, with its report where the target explains
  /// its refusals (a history_adaptor on top); empty when none was refused.
  std::string first_refusal;
  std::chrono::nanoseconds elapsed{};
};

/// Replays `events` against `target` in sequence order. Each logged thread
/// gets a replay thread that runs that thread's events, each when its turn in
/// the sequence comes, so the order across threads is the log's. Each logged
/// stream gets a stream of the target's device (the null stream for pageable
/// memory). A refused allocation is counted, and its free skipped; an
/// allocation the log records as refused is tried again and, if granted,
/// freed at once. Blocks until every stream has completed.
/// \throws cuda_error (or any error but exhaustion) from the target, after
///   stopping every replay thread.
[[nodiscard]] result run(std::span<const event> events, cudapmr::stream_ordered_resource& target);

/// A synthetic workload, for producing logs.
struct workload_options {
  std::size_t threads = 16;
  std::size_t allocations_per_thread = 1000;
  std::size_t max_bytes = std::size_t{1} << 20;
  /// Each thread holds up to this many allocations before freeing one.
  std::size_t live_per_thread = 8;
  std::uint64_t seed = 1;
};

/// Allocates and frees random sizes and alignments from `resource` on
/// several threads, each with a stream of its own (the null stream for
/// pageable memory); one in eight allocations is handed to whichever thread
/// frees next, on its own stream. The threads take turns, so the order in
/// which a logging adaptor logs the events is the order in which a
/// statistics adaptor counts them: a replay of the log reproduces the peak.
/// \throws whatever the resource throws, after every thread has stopped.
void run_workload(cudapmr::stream_ordered_resource& resource, const workload_options& options);

}  // namespace replay
