// SPDX-License-Identifier: Apache-2.0
#include "scale_and_bias.hpp"

#include <cudapmr/error.hpp>
#include <cudapmr/launch.hpp>

#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

namespace demo {
namespace {

constexpr unsigned int block = 256;

/// Explicitly fused, so that every variant rounds alike whatever -fmad says.
__device__ __forceinline__ float apply(float value, float scale, float bias) { return __fmaf_rn(value, scale, bias); }

__device__ __forceinline__ float4 apply(float4 value, float scale, float bias) {
  return make_float4(apply(value.x, scale, bias), apply(value.y, scale, bias), apply(value.z, scale, bias),
                     apply(value.w, scale, bias));
}

__global__ void scale_and_bias_scalar_kernel(float* data, std::size_t count, float scale, float bias) {
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count; i += stride)
    data[i] = apply(data[i], scale, bias);
}

/// Floats before the first 16-byte boundary go one by one, as do those after
/// the last whole float4; the float4s in between go `loads` at a time per
/// thread: all loads first, so that they are in flight together.
template <unsigned loads>
__global__ void __launch_bounds__(block) scale_and_bias_float4_kernel(float* data, std::size_t count, float scale,
                                                                      float bias) {
  const std::size_t misalignment = reinterpret_cast<std::uintptr_t>(data) % sizeof(float4);
  std::size_t head = misalignment == 0 ? 0 : (sizeof(float4) - misalignment) / sizeof(float);
  if (head > count) head = count;
  const std::size_t vectors = (count - head) / 4;
  const std::size_t tail = head + vectors * 4;
  const std::size_t thread = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const std::size_t threads = std::size_t{gridDim.x} * blockDim.x;
  if (thread < head) data[thread] = apply(data[thread], scale, bias);
  if (thread < count - tail) data[tail + thread] = apply(data[tail + thread], scale, bias);

  float4* body = reinterpret_cast<float4*>(data + head);
  std::size_t i = thread;
  for (; i + (loads - 1) * threads < vectors; i += loads * threads) {
    float4 values[loads];
#pragma unroll
    for (unsigned k = 0; k < loads; ++k) values[k] = body[i + k * threads];
#pragma unroll
    for (unsigned k = 0; k < loads; ++k) body[i + k * threads] = apply(values[k], scale, bias);
  }
  for (; i < vectors; i += threads) body[i] = apply(body[i], scale, bias);
}

/// The blocks of `kernel` the current device holds at once: a grid that fills
/// the GPU once, its threads looping over the rest. Cached per device and kernel.
unsigned int resident_blocks(const void* kernel) {
  int device = 0;
  CUDAPMR_CHECK(cudaGetDevice(&device));
  static std::mutex mutex;
  static std::map<std::pair<int, const void*>, unsigned int> known;
  const std::lock_guard lock(mutex);
  auto [entry, inserted] = known.try_emplace({device, kernel}, 0u);
  if (inserted) {
    try {
      int multiprocessors = 0;
      int per_multiprocessor = 0;
      CUDAPMR_CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
      CUDAPMR_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, kernel, block, 0));
      entry->second = static_cast<unsigned int>(multiprocessors * (per_multiprocessor > 0 ? per_multiprocessor : 1));
    } catch (...) {
      known.erase(entry);
      throw;
    }
  }
  return entry->second;
}

template <unsigned loads>
void launch_float4(float* data, std::size_t count, float scale, float bias, cudaStream_t stream) {
  const void* kernel = reinterpret_cast<const void*>(&scale_and_bias_float4_kernel<loads>);
  const std::size_t floats_per_block_pass = std::size_t{block} * loads * 4;
  const std::size_t wanted = (count + floats_per_block_pass - 1) / floats_per_block_pass;
  const std::size_t resident = resident_blocks(kernel);
  const auto blocks = static_cast<unsigned int>(wanted < resident ? wanted : resident);
  cudapmr::launch(scale_and_bias_float4_kernel<loads>, {blocks, block}, stream, data, count, scale, bias);
}

}  // namespace

void scale_and_bias(float* data, std::size_t count, float scale, float bias, cudapmr::stream_ref stream) {
  scale_and_bias_vectorized(data, count, scale, bias, default_loads_in_flight, stream);
}

void scale_and_bias_vectorized(float* data, std::size_t count, float scale, float bias, unsigned loads_in_flight,
                               cudapmr::stream_ref stream) {
  if (count == 0) return;
  switch (loads_in_flight) {
    case 1: return launch_float4<1>(data, count, scale, bias, stream.get());
    case 2: return launch_float4<2>(data, count, scale, bias, stream.get());
    case 4: return launch_float4<4>(data, count, scale, bias, stream.get());
    case 8: return launch_float4<8>(data, count, scale, bias, stream.get());
    default:
      throw std::invalid_argument("scale_and_bias_vectorized: " + std::to_string(loads_in_flight) +
                                  " loads in flight: expected 1, 2, 4 or 8");
  }
}

void scale_and_bias_scalar(float* data, std::size_t count, float scale, float bias, cudapmr::stream_ref stream) {
  if (count == 0) return;
  constexpr std::size_t max_blocks = 4096;  // grid-stride loop covers the rest
  const std::size_t blocks = (count + block - 1) / block;
  cudapmr::launch(scale_and_bias_scalar_kernel, {static_cast<unsigned int>(blocks < max_blocks ? blocks : max_blocks), block},
                  stream, data, count, scale, bias);
}

}  // namespace demo
