// SPDX-License-Identifier: Apache-2.0
#include "peer_allocators.hpp"

#include <cub/util_allocator.cuh>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace bench {
namespace {

class cub_caching_allocator final : public allocator_under_test {
 public:
  explicit cub_caching_allocator(bool tuned)
      : allocator_(tuned ? 2u : 8u, tuned ? 8u : 3u, tuned ? 22u : 7u,
                   tuned ? std::size_t{16} << 30 : std::size_t{3} * 2097152 - 1) {}
  void* allocate(std::size_t bytes, cudaStream_t stream) override {
    void* p = nullptr;
    if (allocator_.DeviceAllocate(&p, bytes, stream) != cudaSuccess) throw std::bad_alloc();
    return p;
  }
  void deallocate(void* p, std::size_t /*bytes*/, cudaStream_t /*stream*/) override {
    static_cast<void>(allocator_.DeviceFree(p));
  }

 private:
  cub::CachingDeviceAllocator allocator_;
};

void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(status));
}

class cuda_pool final : public allocator_under_test {
 public:
  cuda_pool(cudaMemPool_t pool, bool owned) : pool_(pool), owned_(owned) {
    std::uint64_t keep_all = ~std::uint64_t{0};
    check(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep_all), "cudaMemPoolSetAttribute");
  }
  ~cuda_pool() override {
    if (!owned_) return;
    static_cast<void>(cudaDeviceSynchronize());
    static_cast<void>(cudaMemPoolDestroy(pool_));
  }
  cuda_pool(const cuda_pool&) = delete;
  cuda_pool& operator=(const cuda_pool&) = delete;
  void* allocate(std::size_t bytes, cudaStream_t stream) override {
    void* p = nullptr;
    check(cudaMallocFromPoolAsync(&p, bytes, pool_, stream), "cudaMallocFromPoolAsync");
    return p;
  }
  void deallocate(void* p, std::size_t, cudaStream_t stream) override { check(cudaFreeAsync(p, stream), "cudaFreeAsync"); }

 private:
  cudaMemPool_t pool_;
  bool owned_;
};

__global__ void touch_kernel(unsigned int* words, std::size_t count) {
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count;
       i += std::size_t{gridDim.x} * blockDim.x)
    words[i] = static_cast<unsigned int>(i);
}

}  // namespace

std::unique_ptr<allocator_under_test> make_cub_caching_allocator(bool tuned) {
  return std::make_unique<cub_caching_allocator>(tuned);
}

std::unique_ptr<allocator_under_test> make_cuda_pool_allocator(cudaMemPool_t pool, bool owned) {
  return std::make_unique<cuda_pool>(pool, owned);
}

void touch(void* p, std::size_t bytes, cudaStream_t stream) {
  const std::size_t count = bytes / sizeof(unsigned int);
  touch_kernel<<<64, 256, 0, stream>>>(static_cast<unsigned int*>(p), count);
}

}  // namespace bench
