// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Kernel launches that report their own failure, and only theirs.

#include "cudapmr/error.hpp"
#include "cudapmr/stream.hpp"

#include <cuda_runtime.h>

#include <cstddef>

namespace cudapmr {

/// A launch's grid, block and dynamic shared memory.
struct launch_shape {
  dim3 grid;
  dim3 block;
  std::size_t shared_bytes = 0;
};

/// Launches `kernel(arguments...)` on `stream`. Unlike cudaGetLastError after
/// a `<<<>>>` launch, which also reports any earlier, unrelated error as the
/// launch's, this reports the launch's own status and leaves an earlier error
/// pending for its owner.
/// \throws cuda_error naming the launch and CUDA's answer.
template <class... Parameters, class... Arguments>
void launch(void (*kernel)(Parameters...), const launch_shape& shape, stream_ref stream, Arguments&&... arguments) {
  cudaLaunchConfig_t config{};
  config.gridDim = shape.grid;
  config.blockDim = shape.block;
  config.dynamicSmemBytes = shape.shared_bytes;
  config.stream = stream.get();
  if (const cudaError_t status = cudaLaunchKernelEx(&config, kernel, static_cast<Arguments&&>(arguments)...);
      status != cudaSuccess)
    detail::throw_cuda_error(status, "cudaLaunchKernelEx", __FILE__, __LINE__);
}

}  // namespace cudapmr
