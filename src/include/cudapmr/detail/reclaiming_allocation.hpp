// SPDX-License-Identifier: Apache-2.0
#pragma once
// The one way a resource that keeps memory (a cache, a coalescing engine)
// gets memory from its upstream when the upstream may be out of it.

#include "cudapmr/error.hpp"
#include "cudapmr/stream_ordered_resource.hpp"

#include <cstddef>

namespace cudapmr::detail {

/// Asks `upstream` for `bytes` on `stream`; where it refuses, what the caller
/// keeps may be what it lacks, so the caller gives back in two steps, each
/// followed by a new request:
///  1. `give_back_in_order()`: what can go back in stream order on `stream`,
///     waiting for nothing;
///  2. `give_back_all()`: everything, after the devices are idle; it returns
///     a pointer where what it took back can serve the request itself (the
///     caller then hands that out), else null, and the upstream trims too
///     before the last request, whose out_of_memory reaches the caller.
/// The callbacks may throw only out_of_memory's peers the caller expects.
template <class InOrder, class All>
void* allocate_reclaiming(stream_ordered_resource& upstream, std::size_t bytes, std::size_t alignment,
                          stream_ref stream, InOrder&& give_back_in_order, All&& give_back_all) {
  try {
    return upstream.allocate_async(bytes, alignment, stream);
  } catch (const out_of_memory&) {
  }
  give_back_in_order();
  try {
    return upstream.allocate_async(bytes, alignment, stream);
  } catch (const out_of_memory&) {
  }
  if (void* served = give_back_all()) return served;
  upstream.trim(stream);
  return upstream.allocate_async(bytes, alignment, stream);
}

}  // namespace cudapmr::detail
