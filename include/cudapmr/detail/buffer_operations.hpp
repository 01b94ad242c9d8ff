// SPDX-License-Identifier: Apache-2.0
#pragma once
// Non-template work behind buffer<T>, compiled once in src/.

#include "cudapmr/memory_kind.hpp"
#include "cudapmr/stream.hpp"

#include <cstddef>

namespace cudapmr::detail {

/// `count * element_size`. \throws std::invalid_argument naming both when it overflows.
std::size_t checked_byte_count(std::size_t count, std::size_t element_size);

/// \throws std::invalid_argument naming both element counts when they differ.
void check_copy_sizes(const char* operation, std::size_t destination_count, std::size_t source_count,
                      std::size_t element_size);

/// \throws std::invalid_argument saying that `operation` was called on a closed or moved-from buffer.
[[noreturn]] void throw_closed_buffer(const char* operation);

/// One end of a copy as the buffer knows it: its resource's kind and device,
/// so the copy picks its path without asking CUDA about the pointers. A host
/// span is `pageable` with no device (it may still turn out to be pinned).
struct copy_end {
  memory_kind kind;
  int device;
};

/// Copies in stream order: a plain memcpy between pageable ends, pinned
/// staging for large pageable copies, peer or staged copies between devices.
void copy_bytes(void* destination, copy_end to, const void* source, copy_end from, std::size_t bytes,
                stream_ref stream);

/// Writes `count` copies of the `value_bytes`-byte pattern at `value`, in
/// stream order (on the host for pageable memory).
void fill_pattern(void* destination, std::size_t count, const void* value, std::size_t value_bytes,
                  memory_kind kind, stream_ref stream);

/// Launches the fill kernel (src/fill.cu).
void launch_fill_kernel(void* destination, std::size_t count, const void* value, std::size_t value_bytes,
                        stream_ref stream);

}  // namespace cudapmr::detail
