// SPDX-License-Identifier: Apache-2.0
#include "rmm_peers.hpp"

#include <rmm/mr/arena_memory_resource.hpp>
#include <rmm/mr/binning_memory_resource.hpp>
#include <rmm/mr/cuda_async_memory_resource.hpp>
#include <rmm/mr/cuda_memory_resource.hpp>
#include <rmm/mr/pool_memory_resource.hpp>

#include <cuda/stream_ref>

namespace bench {
namespace {

/// Any RMM resource, driven through its stream-ordered interface.
template <class Resource>
class rmm_peer final : public allocator_under_test {
 public:
  template <class... Arguments>
  explicit rmm_peer(Arguments&&... arguments) : resource_(std::forward<Arguments>(arguments)...) {}
  void* allocate(std::size_t bytes, cudaStream_t stream) override {
    return resource_.allocate(::cuda::stream_ref(stream), bytes, 256);
  }
  void deallocate(void* p, std::size_t bytes, cudaStream_t stream) override {
    resource_.deallocate(::cuda::stream_ref(stream), p, bytes, 256);
  }

 private:
  Resource resource_;
};

/// The binning resource and the pool under it, which must outlive it.
class rmm_binning final : public allocator_under_test {
 public:
  rmm_binning() : pool_(rmm::mr::cuda_memory_resource{}, 0), binning_(pool_, 8, 22) {}
  void* allocate(std::size_t bytes, cudaStream_t stream) override {
    return binning_.allocate(::cuda::stream_ref(stream), bytes, 256);
  }
  void deallocate(void* p, std::size_t bytes, cudaStream_t stream) override {
    binning_.deallocate(::cuda::stream_ref(stream), p, bytes, 256);
  }

 private:
  rmm::mr::pool_memory_resource pool_;
  rmm::mr::binning_memory_resource binning_;
};

}  // namespace

std::vector<named_peer> rmm_peers() {
  return {
      {"peer:RMM pool", [] { return std::make_unique<rmm_peer<rmm::mr::pool_memory_resource>>(rmm::mr::cuda_memory_resource{}, std::size_t{0}); }},
      {"peer:RMM arena", [] { return std::make_unique<rmm_peer<rmm::mr::arena_memory_resource>>(rmm::mr::cuda_memory_resource{}); }},
      {"peer:RMM binning", [] { return std::make_unique<rmm_binning>(); }},
      {"peer:RMM cuda_async", [] { return std::make_unique<rmm_peer<rmm::mr::cuda_async_memory_resource>>(); }},
  };
}

}  // namespace bench
