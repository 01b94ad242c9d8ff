// SPDX-License-Identifier: Apache-2.0
#pragma once
// Relaxed stream-capture mode for this thread while in scope: a call that has
// nothing to do with any capture (an event query, a cudaMalloc or cudaFree
// for an uncaptured stream) is then neither refused because another thread,
// or this one on another stream, captures in global or thread-local mode, nor
// does it invalidate that capture.

#include "cudapmr/detail/cuda_check.hpp"

#include <cuda_runtime_api.h>

namespace cudapmr::detail {

class relaxed_capture_scope {
 public:
  relaxed_capture_scope() noexcept { static_cast<void>(recover_from(cudaThreadExchangeStreamCaptureMode(&mode_))); }
  ~relaxed_capture_scope() { static_cast<void>(recover_from(cudaThreadExchangeStreamCaptureMode(&mode_))); }
  relaxed_capture_scope(const relaxed_capture_scope&) = delete;
  relaxed_capture_scope& operator=(const relaxed_capture_scope&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;  // the caller's mode while in scope
};

}  // namespace cudapmr::detail
