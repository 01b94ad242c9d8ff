// SPDX-License-Identifier: Apache-2.0
// A std::pmr::vector in pinned host memory feeding a kernel: the host fills
// the vector, a kernel updates it in place through its data() pointer, and
// the host reads the results, with no copies and no staging buffers.
#include <cudapmr/error.hpp>
#include <cudapmr/launch.hpp>
#include <cudapmr/pinned_memory_resource.hpp>
#include <cudapmr/stream.hpp>

#include <cstdio>
#include <memory_resource>
#include <numeric>
#include <vector>

__global__ void double_plus_one(float* values, std::size_t count) {
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count;
       i += std::size_t{gridDim.x} * blockDim.x)
    values[i] = values[i] * 2.0f + 1.0f;
}

int main() try {
  cudapmr::pinned_memory_resource pinned;  // page-locked host memory that every GPU can reach
  const cudapmr::stream stream(0);

  // A standard container; pmr's allocate waits for the memory, so it is usable at once.
  std::pmr::vector<float> values(1 << 20, &pinned);
  std::iota(values.begin(), values.end(), 0.0f);

  cudapmr::launch(double_plus_one, {1024, 256}, stream, values.data(), values.size());
  stream.synchronize();  // the kernel's writes are now visible to the host

  std::size_t wrong = 0;
  for (std::size_t i = 0; i < values.size(); ++i) wrong += values[i] != static_cast<float>(i) * 2.0f + 1.0f;
  if (wrong != 0) {
    std::printf("pinned_vector: %zu of %zu elements are wrong\n", wrong, values.size());
    return 1;
  }
  std::printf("pinned_vector: a kernel updated %zu elements of a std::pmr::vector in pinned memory in place\n",
              values.size());
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "pinned_vector: %s\n", error.what());
  return 2;
}
