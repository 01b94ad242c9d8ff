// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/stream.hpp"

#include "cudapmr/detail/cuda_check.hpp"

#include "cudapmr/detail/lifetime.hpp"
#include "cudapmr/device.hpp"
#include "cudapmr/error.hpp"

#include <utility>

namespace cudapmr {
namespace {

/// Waits for the work queued on `handle`, so that memory still to be freed on
/// it can be freed on another stream at once, then destroys it. Errors are
/// ignored: a destructor never throws.
void destroy(cudaStream_t handle) noexcept {
  if (handle == nullptr) return;
  static_cast<void>(detail::recover_from(cudaStreamSynchronize(handle)));  // may carry a failed kernel's error
  detail::retire_stream(handle);
  CUDAPMR_ASSERT_CUDA_SUCCESS(cudaStreamDestroy(handle));
}

}  // namespace

stream::stream() : stream(device::current().ordinal()) {}

stream::stream(int device) : device_(device) {
  detail::validate_device_ordinal(device);
  detail::scoped_device guard(device);
  CUDAPMR_CHECK(cudaStreamCreateWithFlags(&handle_, cudaStreamNonBlocking));
  detail::adopt_stream(handle_);
}

stream::~stream() { destroy(handle_); }

stream::stream(stream&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), device_(std::exchange(other.device_, -1)) {}

stream& stream::operator=(stream&& other) noexcept {
  if (this != &other) {
    destroy(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    device_ = std::exchange(other.device_, -1);
  }
  return *this;
}

void stream::synchronize() const { CUDAPMR_CHECK(cudaStreamSynchronize(handle_)); }

}  // namespace cudapmr
