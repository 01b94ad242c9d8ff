// SPDX-License-Identifier: Apache-2.0
#pragma once
// Prefetch and advice over managed memory, behind managed_memory_resource and
// buffer<T> (src/managed_operations.cpp).

#include "cudapmr/managed_hints.hpp"
#include "cudapmr/memory_kind.hpp"
#include "cudapmr/stream.hpp"

#include <cstddef>

namespace cudapmr::detail {

/// \throws std::invalid_argument saying that `operation` needs managed memory
/// and naming `kind`, unless `kind` is managed.
void require_managed_kind(memory_kind kind, const char* operation);

/// Migrates [p, p + bytes) to `location` in stream order on `stream`; nothing for zero bytes.
/// \throws std::invalid_argument naming `operation` if the range is not managed
///   memory or the location names no device; cuda_error otherwise.
void prefetch_managed(const void* p, std::size_t bytes, memory_location location, stream_ref stream,
                      const char* operation);

/// Gives `advice` about [p, p + bytes) for `location`; nothing for zero bytes.
/// \throws as `prefetch_managed`.
void advise_managed(const void* p, std::size_t bytes, managed_advice advice, memory_location location,
                    const char* operation);

}  // namespace cudapmr::detail
