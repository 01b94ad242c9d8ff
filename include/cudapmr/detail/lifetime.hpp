// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a buffer needs to know when it is closed late: whether its resource
// still exists, and whether its stream was a cudapmr::stream since destroyed.
// The checks cost a load or two at close; allocation never pays for them.

#include "cudapmr/stream.hpp"

#include <cstddef>
#include <cstdint>

namespace cudapmr {
class stream_ordered_resource;
}  // namespace cudapmr

namespace cudapmr::detail {

/// A resource's identity for lifetime checks: a slot of a process-wide table
/// and the slot's generation. 0 means untracked (the table was full), which
/// counts as alive.
using resource_identity = std::uint64_t;

/// Takes a slot for a new resource. Never throws.
[[nodiscard]] resource_identity register_resource() noexcept;
/// Marks the resource gone: `is_live_resource` is false for it from now on.
void retire_resource(resource_identity identity) noexcept;
/// Whether the resource of `identity` has not been destroyed. Lock-free.
[[nodiscard]] bool is_live_resource(resource_identity identity) noexcept;

/// Called by cudapmr::stream after it has synchronized and before it destroys
/// its handle, and after it creates one (CUDA reuses handles).
void retire_stream(cudaStream_t handle) noexcept;
void adopt_stream(cudaStream_t handle) noexcept;
/// Whether `stream` is the handle of a destroyed cudapmr::stream that no
/// cudapmr::stream has taken again. One relaxed load while there is none.
[[nodiscard]] bool is_retired_stream(stream_ref stream) noexcept;

/// How a buffer frees its memory, whenever it is closed:
/// - the resource (`identity`) is gone: the memory is abandoned (below);
/// - `stream` is a destroyed cudapmr::stream: the devices of the resource are
///   synchronized (CUDA may have given the handle to a stream made some other
///   way, whose work must finish first), then the memory is freed on the
///   resource's bound stream;
/// - otherwise it is freed in stream order on `stream`.
void close_buffer(stream_ordered_resource* resource, resource_identity identity, void* p, std::size_t bytes,
                  std::size_t alignment, stream_ref stream) noexcept;

/// Gives up memory whose resource is gone: keeps the pointer reachable (so
/// leak checkers see a known, deliberate leak) and writes one line to stderr
/// (the first ten times; later ones are only counted).
void abandon_allocation(void* p, std::size_t bytes, resource_identity identity) noexcept;
/// How many allocations were abandoned so far.
[[nodiscard]] std::size_t abandoned_allocations() noexcept;

}  // namespace cudapmr::detail
