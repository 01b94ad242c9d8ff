// SPDX-License-Identifier: Apache-2.0
#pragma once
// Pieces of the benchmarks that need nvcc: the peers' CUDA-side allocators
// and a kernel to keep streams busy.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

namespace bench {

/// One allocator as the benchmarks drive it: a pair of calls on a stream.
class allocator_under_test {
 public:
  virtual ~allocator_under_test() = default;
  virtual void* allocate(std::size_t bytes, cudaStream_t stream) = 0;
  virtual void deallocate(void* p, std::size_t bytes, cudaStream_t stream) = 0;
};

/// cub::CachingDeviceAllocator with its defaults (bins 8^3 .. 8^7 bytes, at
/// most 6 MB cached), or tuned for the benchmarks' sizes (power-of-two bins
/// from 256 B to 4 MiB, 16 GiB cached).
std::unique_ptr<allocator_under_test> make_cub_caching_allocator(bool tuned);

/// cudaMallocFromPoolAsync / cudaFreeAsync from `pool`, its release threshold
/// set to keep all memory (cudaMallocAsync's own pool is the device's default
/// one). With `owned`, the pool is destroyed with the allocator.
std::unique_ptr<allocator_under_test> make_cuda_pool_allocator(cudaMemPool_t pool, bool owned = false);

/// Queues a kernel that writes `bytes` at `p` (device-accessible) on `stream`.
void touch(void* p, std::size_t bytes, cudaStream_t stream);

}  // namespace bench
