// SPDX-License-Identifier: Apache-2.0
#pragma once
// The sample's in-place kernel, data[i] = data[i] * scale + bias, computed as
// one fused multiply-add (what nvcc makes of the expression by default).

#include <cudapmr/stream.hpp>

#include <cstddef>

namespace demo {

/// Queues scale_and_bias over `count` floats at `data` (device-accessible, any
/// float alignment) on `stream`: 16-byte loads and stores with a scalar head
/// and tail, a grid of the blocks the GPU holds at once, and
/// `default_loads_in_flight` independent loads per thread.
/// \throws cudapmr::cuda_error if the launch fails.
void scale_and_bias(float* data, std::size_t count, float scale, float bias, cudapmr::stream_ref stream);

/// The float4 kernel with `loads_in_flight` (1, 2, 4 or 8) independent loads
/// per thread, for tuning: the benchmarks compare them. Results are the same.
/// \throws std::invalid_argument for another value; cudapmr::cuda_error if the launch fails.
void scale_and_bias_vectorized(float* data, std::size_t count, float scale, float bias, unsigned loads_in_flight,
                               cudapmr::stream_ref stream);

/// The sample's one-float-per-thread loop: the baseline the benchmarks compare against.
/// \throws cudapmr::cuda_error if the launch fails.
void scale_and_bias_scalar(float* data, std::size_t count, float scale, float bias, cudapmr::stream_ref stream);

/// The loads in flight per thread of `scale_and_bias`.
inline constexpr unsigned default_loads_in_flight = 4;

}  // namespace demo
