#include "peer_allocators.hpp"

#include <cub/util_allocator.cuh>

#include <stdexcept>

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

__global__ void touch_kernel(unsigned int* words, std::size_t count) {
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count;
       i += std::size_t{gridDim.x} * blockDim.x)
    words[i] = static_cast<unsigned int>(i);
}

}  // namespace

std::unique_ptr<allocator_under_test> make_cub_caching_allocator(bool tuned) {
  return std::make_unique<cub_caching_allocator>(tuned);
}

void touch(void* p, std::size_t bytes, cudaStream_t stream) {
  const std::size_t count = bytes / sizeof(unsigned int);
  touch_kernel<<<64, 256, 0, stream>>>(static_cast<unsigned int*>(p), count);
}

}  // namespace bench
