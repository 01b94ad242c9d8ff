// SPDX-License-Identifier: Apache-2.0
#include "support/gpu.hpp"

#include <cudapmr/error.hpp>

namespace cudapmr::test {
namespace {

constexpr unsigned int block = 256;

unsigned int grid_for(std::size_t count) {
  const std::size_t blocks = (count + block - 1) / block;
  return static_cast<unsigned int>(blocks < 4096 ? (blocks == 0 ? 1 : blocks) : 4096);
}

__global__ void write_sequence_kernel(std::uint32_t* data, std::size_t count, std::uint32_t seed) {
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count;
       i += std::size_t{gridDim.x} * blockDim.x)
    data[i] = seed + static_cast<std::uint32_t>(i);
}

__global__ void add_kernel(std::uint32_t* data, std::size_t count, std::uint32_t increment) {
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count;
       i += std::size_t{gridDim.x} * blockDim.x)
    data[i] += increment;
}

__global__ void count_mismatches_kernel(const std::uint32_t* data, std::size_t count, std::uint32_t seed,
                                        unsigned long long* mismatches) {
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count;
       i += std::size_t{gridDim.x} * blockDim.x)
    if (data[i] != seed + static_cast<std::uint32_t>(i)) atomicAdd(mismatches, 1ull);
}

}  // namespace

void load_test_kernels() {
  cudaFuncAttributes attributes{};
  CUDAPMR_CHECK(cudaFuncGetAttributes(&attributes, write_sequence_kernel));
  CUDAPMR_CHECK(cudaFuncGetAttributes(&attributes, add_kernel));
  CUDAPMR_CHECK(cudaFuncGetAttributes(&attributes, count_mismatches_kernel));
}

void write_sequence(std::uint32_t* data, std::size_t count, std::uint32_t seed, stream_ref stream) {
  write_sequence_kernel<<<grid_for(count), block, 0, stream.get()>>>(data, count, seed);
  CUDAPMR_CHECK(cudaGetLastError());
}

void add_to_each(std::uint32_t* data, std::size_t count, std::uint32_t increment, stream_ref stream) {
  add_kernel<<<grid_for(count), block, 0, stream.get()>>>(data, count, increment);
  CUDAPMR_CHECK(cudaGetLastError());
}

std::size_t count_sequence_mismatches(const std::uint32_t* data, std::size_t count, std::uint32_t seed,
                                      stream_ref stream) {
  unsigned long long* mismatches = nullptr;
  CUDAPMR_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&mismatches), sizeof(*mismatches), stream.get()));
  std::size_t result = 0;
  try {
    result = count_sequence_mismatches(data, count, seed, stream, mismatches);
  } catch (...) {
    static_cast<void>(cudaFreeAsync(mismatches, stream.get()));
    throw;
  }
  CUDAPMR_CHECK(cudaFreeAsync(mismatches, stream.get()));
  return result;
}

std::size_t count_sequence_mismatches(const std::uint32_t* data, std::size_t count, std::uint32_t seed,
                                      stream_ref stream, unsigned long long* counter) {
  CUDAPMR_CHECK(cudaMemsetAsync(counter, 0, sizeof(*counter), stream.get()));
  count_mismatches_kernel<<<grid_for(count), block, 0, stream.get()>>>(data, count, seed, counter);
  CUDAPMR_CHECK(cudaGetLastError());
  unsigned long long result = 0;
  CUDAPMR_CHECK(cudaMemcpyAsync(&result, counter, sizeof(result), cudaMemcpyDefault, stream.get()));
  CUDAPMR_CHECK(cudaStreamSynchronize(stream.get()));
  return static_cast<std::size_t>(result);
}

}  // namespace cudapmr::test
