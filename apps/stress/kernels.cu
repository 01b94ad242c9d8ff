// SPDX-License-Identifier: Apache-2.0
#include "kernels.hpp"

#include <cudapmr/error.hpp>
#include <cudapmr/launch.hpp>

namespace stress {
namespace {

constexpr unsigned int block_size = 256;

unsigned int grid_for(std::size_t bytes) {
  const std::size_t blocks = (bytes + block_size - 1) / block_size;
  return static_cast<unsigned int>(blocks == 0 ? 1 : (blocks < 1024 ? blocks : 1024));
}

__global__ void stamp_kernel(std::uint8_t* data, std::size_t bytes, std::uint32_t seed) {
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < bytes;
       i += std::size_t{gridDim.x} * blockDim.x)
    data[i] = sequence_byte(seed, i);
}

__global__ void add_kernel(std::uint8_t* data, std::size_t bytes, std::uint8_t value) {
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < bytes;
       i += std::size_t{gridDim.x} * blockDim.x)
    data[i] = static_cast<std::uint8_t>(data[i] + value);
}

__global__ void check_kernel(const std::uint8_t* data, std::size_t bytes, pattern expected,
                             unsigned long long* mismatches) {
  unsigned long long local = 0;
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < bytes;
       i += std::size_t{gridDim.x} * blockDim.x)
    if (data[i] != expected_byte(expected, i)) ++local;
  if (local != 0) atomicAdd(mismatches, local);
}

}  // namespace

void stamp_on_device(void* p, std::size_t bytes, std::uint32_t seed, cudapmr::stream_ref stream) {
  cudapmr::launch(stamp_kernel, {grid_for(bytes), block_size}, stream, static_cast<std::uint8_t*>(p), bytes, seed);
}

void add_on_device(void* p, std::size_t bytes, std::uint8_t value, cudapmr::stream_ref stream) {
  cudapmr::launch(add_kernel, {grid_for(bytes), block_size}, stream, static_cast<std::uint8_t*>(p), bytes, value);
}

void check_on_device(const void* p, std::size_t bytes, const pattern& expected, unsigned long long* mismatches,
                     cudapmr::stream_ref stream) {
  cudapmr::launch(check_kernel, {grid_for(bytes), block_size}, stream, static_cast<const std::uint8_t*>(p), bytes,
                  expected, mismatches);
}

}  // namespace stress
