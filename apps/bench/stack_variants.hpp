// SPDX-License-Identifier: Apache-2.0
#pragma once
// The device_stack variants both benches run beside the default, each a
// design step measured before it is taken (docs/performance.md).

#include <cudapmr/device_stack.hpp>

#include <cstddef>

namespace cudapmr::bench {

/// The engine keeps its idle segments instead of giving them back at frees:
/// what giving back costs in time, against what it saves in memory.
inline device_stack_options engine_keeps_idle_segments() {
  device_stack_options options;
  options.engine.max_idle_bytes.reset();
  return options;
}

/// The front keeps the blocks its stream freed when a request too large for
/// it comes (as before f11b1d5): what the hand-back costs small requests among
/// large ones, against what it saves a working set whose sizes change.
inline device_stack_options front_keeps_blocks_at_large_requests() {
  device_stack_options options;
  options.front.hand_back_before_large = false;
  return options;
}

/// The front offers a stream's freed blocks to every stream past a fixed
/// 4 MiB instead of past its default share, which follows what is live (half
/// the recent live peak split among the streams freeing lately, at least
/// 4 MiB): the default's events and memory against the most frugal share.
inline device_stack_options front_offers_past_4_mib_a_stream() {
  device_stack_options options;
  options.front.stream_share = std::size_t{4} << 20;
  return options;
}

}  // namespace cudapmr::bench
