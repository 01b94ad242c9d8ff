#pragma once
// The sample's in-place kernel: data[i] = data[i] * scale + bias.

#include <cudapmr/stream.hpp>

#include <cstddef>

namespace demo {

/// Queues scale_and_bias over `count` floats at `data` (device-accessible) on `stream`.
/// \throws cudapmr::cuda_error if the launch fails.
void scale_and_bias(float* data, std::size_t count, float scale, float bias, cudapmr::stream_ref stream);

}  // namespace demo
