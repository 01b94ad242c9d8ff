// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file memory_snapshot.hpp
/// What a stack of resources holds at one moment: each resource's used,
/// reserved and cached bytes, the live blocks, the recent history and the
/// user's annotations; and the report an out_of_memory carries.

#include "cudapmr/adaptors/history_adaptor.hpp"
#include "cudapmr/adaptors/statistics_adaptor.hpp"
#include "cudapmr/adaptors/tracking_adaptor.hpp"
#include "cudapmr/stream_ordered_resource.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cudapmr {

/// A stack of resources at one moment.
struct memory_snapshot {
  /// When it was taken (steady clock, ns).
  std::uint64_t time_ns = 0;
  /// Each resource from the top of the stack down to the leaf.
  std::vector<resource_state> resources;
  /// Live blocks, oldest first: from the topmost tracking_adaptor, else
  /// reconstructed from the topmost history_adaptor's events.
  std::vector<allocation_record> live_blocks;
  /// False when the live blocks may be missing some: no tracking adaptor,
  /// and the history lost older events (or there is none).
  bool live_blocks_complete = false;
  /// The topmost history_adaptor's events, oldest first, and how many it lost.
  std::vector<history_event> events;
  std::uint64_t events_dropped = 0;
  std::vector<history_annotation> annotations;
};

/// A snapshot of `top` and every resource below it (through `upstream_resource()`).
/// Reading the counters takes each resource's own locks briefly; recording
/// goes on meanwhile. \throws std::bad_alloc only (a resource whose counters
/// cannot be read is listed without them).
[[nodiscard]] memory_snapshot snapshot(const stream_ordered_resource& top);

/// The most bytes live at once over the snapshot's events, counted from zero
/// at the first: where the ring dropped older events, blocks allocated
/// before them are not counted.
[[nodiscard]] std::size_t peak_live_bytes(const memory_snapshot& taken);

/// Live bytes from one place in the code.
struct call_site_usage {
  /// The innermost frame outside cudapmr, symbolized; "unknown" without call stacks.
  std::string call_site;
  std::size_t bytes = 0;
  std::size_t blocks = 0;
};

/// Live bytes allocated on one stream.
struct stream_usage {
  stream_ref stream{cudaStream_t{}};
  std::size_t bytes = 0;
  std::size_t blocks = 0;
};

/// Why an allocation failed, as an observing stack sees it: carried by the
/// `out_of_memory` a history_adaptor rethrows.
struct out_of_memory_report {
  /// What was asked, and of which resource.
  std::size_t requested_bytes = 0;
  std::size_t alignment = 0;
  stream_ref stream{cudaStream_t{}};
  std::string resource;
  /// What is live, and whether that is all of it (see `memory_snapshot::live_blocks_complete`).
  std::size_t live_bytes = 0;
  std::size_t live_blocks = 0;
  bool live_complete = false;
  /// The largest holders first, at most five of each.
  std::vector<call_site_usage> top_call_sites;
  std::vector<stream_usage> top_streams;
  /// Free memory held by caches and pools in the stack, which releasing or trimming them gives back.
  std::size_t reclaimable_bytes = 0;
  /// The device's free memory, where the memory is a device's.
  std::optional<std::size_t> device_free_bytes;
  /// Whether a cap or capacity in the stack (a limiting adaptor's, a host
  /// resource's) leaves no room for the request even with every cache above it emptied.
  bool refused_by_cap = false;
  /// Whether releasing caches and trimming pools would have left room for the
  /// request (by bytes: fragmentation can still refuse it).
  bool trimming_would_make_room = false;
  /// The whole stack at the refusal.
  memory_snapshot state;
  /// All of the above, readable, one item a line.
  std::string text;
};

/// The report of a refused request of `bytes` (`alignment`, `stream`) to `top`.
/// \throws std::bad_alloc only.
[[nodiscard]] out_of_memory_report explain_out_of_memory(const stream_ordered_resource& top, std::size_t bytes,
                                                         std::size_t alignment, stream_ref stream);

}  // namespace cudapmr
