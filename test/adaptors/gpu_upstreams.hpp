// SPDX-License-Identifier: Apache-2.0
#pragma once
// One fresh pool of each CUDA kind, for running an adaptor over each on the GPU.

#include <cudapmr/device_memory_resource.hpp>
#include <cudapmr/managed_memory_resource.hpp>
#include <cudapmr/pinned_memory_resource.hpp>

#include <array>

namespace cudapmr::test {

/// Owned pools (their statistics start at zero) of device 0.
class gpu_upstreams {
 public:
  gpu_upstreams()
      : device_memory_(0, device_pool_options{}),
        pinned_(pinned_pool_options{}),
        managed_(managed_pool_options{.preferred_device = 0}) {}

  /// Device, pinned and managed, in that order.
  [[nodiscard]] std::array<pool_resource*, 3> all() noexcept { return {&device_memory_, &pinned_, &managed_}; }

 private:
  device_memory_resource device_memory_;
  pinned_memory_resource pinned_;
  managed_memory_resource managed_;
};

}  // namespace cudapmr::test
