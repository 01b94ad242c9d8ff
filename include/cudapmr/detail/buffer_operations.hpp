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

/// Copies in stream order; with both sides in pageable memory, a plain memcpy.
void copy_bytes(void* destination, bool destination_pageable, const void* source, bool source_pageable,
                std::size_t bytes, stream_ref stream);

/// Writes `count` copies of the `value_bytes`-byte pattern at `value`, in
/// stream order (on the host for pageable memory).
void fill_pattern(void* destination, std::size_t count, const void* value, std::size_t value_bytes,
                  memory_kind kind, stream_ref stream);

/// Launches the fill kernel (src/fill.cu).
void launch_fill_kernel(void* destination, std::size_t count, const void* value, std::size_t value_bytes,
                        stream_ref stream);

}  // namespace cudapmr::detail
