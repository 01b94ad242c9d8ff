// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file sanitizer_annotations.hpp
/// Telling compute-sanitizer what it cannot see. Its initcheck tool follows
/// the GPU's stores, memsets and most copies, but not the host's stores into
/// pinned or managed memory that came from a pool, nor the copies into pinned
/// memory that the driver makes with the CPU; a kernel that later reads such
/// memory is reported as reading uninitialized memory. These annotations reach
/// the tool through NVTX and cost one branch when no tool is attached.

#include "cudapmr/stream.hpp"

#include <cstddef>
#include <span>

namespace cudapmr {

/// Marks the `bytes` bytes at `p` as initialized, in stream order on
/// `stream`: call it after the host has written them and before the GPU reads
/// them. `p` must be memory CUDA allocated (pinned, managed or device): the
/// tool rejects other ranges with a warning that counts as an error. Null or
/// empty ranges are ignored.
void mark_initialized(const void* p, std::size_t bytes, stream_ref stream) noexcept;

/// Marks the elements of `written` as initialized; see above.
template <class T, std::size_t Extent>
void mark_initialized(std::span<T, Extent> written, stream_ref stream) noexcept {
  mark_initialized(static_cast<const void*>(written.data()), written.size_bytes(), stream);
}

}  // namespace cudapmr
