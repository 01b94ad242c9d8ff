// SPDX-License-Identifier: Apache-2.0
#pragma once
// Copies between pageable host memory and device-side memory through a
// pipeline of pinned staging blocks, the host side split over the library's
// thread pool (src/staged_copy.cpp).

#include "cudapmr/stream.hpp"

#include <cstddef>
#include <optional>

namespace cudapmr {
class pinned_memory_resource;
}

namespace cudapmr::detail {

/// Copies smaller than this keep the driver's own pageable path: below it the
/// fixed costs of staging (waking threads, a DMA and an event per chunk)
/// outweigh the faster host copy. apps/bench measures both paths at every size
/// (copy/*/pageable/*: cudapmr:staged against peer:driver).
inline constexpr std::size_t staged_copy_threshold = std::size_t{1} << 20;
/// Staging blocks per pipeline: a host copy into one block overlaps the DMA of
/// the others, and one late DMA does not stall the host.
inline constexpr std::size_t staging_block_count = 4;
/// The largest chunk, one staging block: per-chunk costs (a barrier of the
/// host threads, a DMA launch, an event) stay a few percent of its copy time.
inline constexpr std::size_t staging_block_bytes = std::size_t{16} << 20;
/// The smallest chunk of a staged copy.
inline constexpr std::size_t min_staging_chunk = std::size_t{1} << 20;

/// The chunk size of a staged copy of `bytes`: a quarter of the copy, so that
/// mid-sized copies overlap host copies with DMA too, rounded up to the host
/// copy granule and kept between `min_staging_chunk` and `staging_block_bytes`.
[[nodiscard]] std::size_t staging_chunk_bytes(std::size_t bytes) noexcept;

/// The NUMA node whose memory and processors stage copies for `device`: the
/// one nearest it (`nearest_numa_node`), or `any_numa_node` where none is known.
/// \throws std::invalid_argument for a bad ordinal; cuda_error.
[[nodiscard]] int staging_numa_node(int device);

/// The pinned pool the staging blocks on `numa_node` come from (where the
/// driver refused that node, its `placement_note()` says so).
/// \throws std::invalid_argument for a node the machine lacks; cuda_error.
[[nodiscard]] const pinned_memory_resource& staging_pool(int numa_node);

/// Frees the idle staging sets, their pinned memory back to the pools, once
/// the DMAs that last used them have finished (it waits for them); later
/// copies make new ones. Copies running meanwhile keep theirs.
void give_back_idle_staging() noexcept;

/// Which way a staged copy goes.
enum class copy_direction { to_device, to_host };

/// Copies `bytes` through pinned staging when the host side (the source for
/// `to_device`, the destination for `to_host`) is pageable host memory, the
/// other side device or managed memory, and `bytes` is at least
/// `staged_copy_threshold`, and `stream` is not being captured; otherwise
/// returns false, having done nothing.
/// Semantics as `staged_copy_to_device` / `staged_copy_to_host`. \throws cuda_error.
bool try_staged_copy(void* destination, const void* source, std::size_t bytes, copy_direction direction,
                     stream_ref stream);

/// Copies pageable host memory to device-accessible memory through pinned
/// staging, in order on `stream`. Returns once the source has been read (the
/// last chunks' DMA may still run): more than stream order promises, the
/// source may be reused at once. A copy larger than the staging waits for its
/// own earlier chunks, and so for work queued on `stream` before it. The
/// staging blocks and the threads that fill them are on `numa_node`, by
/// default `staging_numa_node` of the stream's device (the bench compares nodes).
/// \throws std::invalid_argument for a stream being captured; cuda_error.
void staged_copy_to_device(void* destination, const void* host_source, std::size_t bytes, stream_ref stream,
                           std::optional<int> numa_node = std::nullopt);

/// Copies device-accessible memory to pageable host memory through pinned
/// staging, in order on `stream`. Returns once the data is in the destination,
/// so it waits for earlier work on `stream`, as the driver's pageable path
/// does. Staging on `numa_node`, as above. \throws std::invalid_argument for a
/// stream being captured; cuda_error.
void staged_copy_to_host(void* host_destination, const void* source, std::size_t bytes, stream_ref stream,
                         std::optional<int> numa_node = std::nullopt);

}  // namespace cudapmr::detail
