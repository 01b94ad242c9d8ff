// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file resource_state.hpp
/// What one resource holds and hands out, as it reports itself through
/// `stream_ordered_resource::state()`: the vocabulary of snapshots,
/// out-of-memory reports and statistics.

#include "cudapmr/memory_kind.hpp"
#include "cudapmr/stream.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cudapmr {

/// One quantity over time. Signed, because a per-stream count goes down when
/// memory allocated on another stream is freed on this one.
struct usage_counter {
  std::int64_t current = 0;
  /// The highest `current` since construction or the last `reset_peak()`.
  std::int64_t peak = 0;
  /// Everything ever added.
  std::int64_t total = 0;
  friend bool operator==(const usage_counter&, const usage_counter&) = default;
};

/// A snapshot of a statistics_adaptor's counters. Bytes are as requested (not
/// what the upstream rounded them up to); failed and zero-byte allocations
/// (which give null and are never freed) do not count.
struct resource_statistics {
  usage_counter bytes;
  usage_counter allocations;
  friend bool operator==(const resource_statistics&, const resource_statistics&) = default;
};

/// Bytes attributed to one stream.
struct stream_bytes {
  stream_ref stream{cudaStream_t{}};
  std::size_t bytes = 0;
};

/// One resource of a stack, as far as it can tell about itself. A quantity a
/// resource does not know is empty.
struct resource_state {
  /// Its description without its upstream's: "caching_resource", "device_memory_resource (device 0)".
  std::string name;
  memory_kind kind = memory_kind::pageable;
  int device = -1;
  /// Handed out through it and not yet freed, and the highest that was.
  std::optional<std::size_t> used_bytes;
  std::optional<std::size_t> peak_used_bytes;
  /// Held from the system (a pool's reserve), and the highest that was.
  std::optional<std::size_t> reserved_bytes;
  std::optional<std::size_t> peak_reserved_bytes;
  /// Held free for reuse (a cache), overall and per stream.
  std::optional<std::size_t> cached_bytes;
  std::vector<stream_bytes> cached_bytes_by_stream;
  /// The largest request it could serve now without asking its upstream or the system.
  std::optional<std::size_t> largest_free_block;
  /// The most it may hand out (a limiting adaptor's cap, a host resource's capacity).
  std::optional<std::size_t> cap_bytes;
  /// What `trim` would give back of what it holds itself (not its upstream's).
  std::optional<std::size_t> releasable_bytes;
  /// A statistics_adaptor's counters.
  std::optional<resource_statistics> statistics;
  /// The host NUMA node its pages are on (a pinned pool's); empty where the kernel chooses or it is not host memory.
  std::optional<int> numa_node;
  /// Something the reader should know about it: why it is not where it was asked to be, a fallback taken.
  std::string note;
};

/// What `state` holds, in one line for people ("used 1 MiB, reserved 32 MiB,
/// cached 4 MiB, on NUMA node 0"): its known quantities only, empty when it
/// tells nothing. The out-of-memory report and the demo's `--report` print it.
[[nodiscard]] std::string describe_holdings(const resource_state& state);

}  // namespace cudapmr
