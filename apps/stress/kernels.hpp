// SPDX-License-Identifier: Apache-2.0
#pragma once
// The stress run's kernels (kernels.cu): stamp, change and check an allocation
// in stream order.

#include "pattern.hpp"

#include <cudapmr/stream.hpp>

#include <cstddef>
#include <cstdint>

namespace stress {

/// Writes the sequence of `seed` into the `bytes` at `p`. \throws cudapmr::cuda_error.
void stamp_on_device(void* p, std::size_t bytes, std::uint32_t seed, cudapmr::stream_ref stream);
/// Adds `value` to each of the `bytes` at `p`. \throws cudapmr::cuda_error.
void add_on_device(void* p, std::size_t bytes, std::uint8_t value, cudapmr::stream_ref stream);
/// Adds the number of bytes at `p` that differ from `expected` to `*mismatches`
/// (device-accessible). \throws cudapmr::cuda_error.
void check_on_device(const void* p, std::size_t bytes, const pattern& expected, unsigned long long* mismatches,
                     cudapmr::stream_ref stream);

}  // namespace stress
