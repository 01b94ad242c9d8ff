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

/// cub::CachingDeviceAllocator with its default bins.
std::unique_ptr<allocator_under_test> make_cub_caching_allocator();

/// Queues a kernel that writes `bytes` at `p` (device-accessible) on `stream`.
void touch(void* p, std::size_t bytes, cudaStream_t stream);

}  // namespace bench
