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

/// Requests up to 4 MiB (the front's blocks) share 8 MiB segments of their
/// own, apart from larger blocks: in the host replay of PyTorch's training
/// loop the stack's peak falls from 610 to 594 MiB at the mix's time.
inline device_stack_options small_segments_to_4_mib() {
  device_stack_options options;
  options.engine.small_request = std::size_t{4} << 20;
  options.engine.small_segment = std::size_t{8} << 20;
  return options;
}

}  // namespace cudapmr::bench
