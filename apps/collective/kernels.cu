// SPDX-License-Identifier: Apache-2.0
#include "kernels.hpp"

#include <cudapmr/error.hpp>
#include <cudapmr/launch.hpp>

namespace collective {
namespace {

constexpr unsigned int block = 256;
constexpr std::size_t pattern_period = 251;

__host__ __device__ float pattern(std::size_t i) { return static_cast<float>(1 + i % pattern_period); }

unsigned int grid_for(std::size_t count) {
  const std::size_t blocks = (count + block - 1) / block;
  return static_cast<unsigned int>(blocks < 8192 ? (blocks == 0 ? 1 : blocks) : 8192);  // grid-stride loops do the rest
}

__global__ void fill_kernel(float* values, std::size_t count, float scale) {
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count;
       i += std::size_t{gridDim.x} * blockDim.x)
    values[i] = scale * pattern(i);
}

__global__ void check_kernel(const float* values, std::size_t count, float scale, unsigned long long* wrong) {
  unsigned long long mine = 0;
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count;
       i += std::size_t{gridDim.x} * blockDim.x)
    mine += values[i] != scale * pattern(i) ? 1 : 0;
  if (mine != 0) atomicAdd(wrong, mine);
}

}  // namespace

void fill_rank_values(float* values, std::size_t count, int rank, cudaStream_t stream) {
  cudapmr::launch(fill_kernel, {grid_for(count), block}, stream, values, count, static_cast<float>(rank + 1));
}

void count_wrong_sums(const float* values, std::size_t count, int ranks, unsigned long long* wrong,
                      cudaStream_t stream) {
  const float sum_of_scales = static_cast<float>(ranks) * static_cast<float>(ranks + 1) / 2;  // 1 + 2 + ... + ranks
  cudapmr::launch(check_kernel, {grid_for(count), block}, stream, values, count, sum_of_scales, wrong);
}

}  // namespace collective
