// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file stream.hpp
/// Stream vocabulary: CCCL's non-owning `cuda::stream_ref` and an owning stream.

#include <cuda/stream_ref>
#include <cuda_runtime_api.h>

namespace cudapmr {

/// The stream argument of every stream-ordered call; interoperates with CCCL,
/// Thrust and RMM, and converts implicitly from `cudaStream_t`.
using stream_ref = ::cuda::stream_ref;

/// An owning, move-only, non-blocking CUDA stream of one device.
class stream {
 public:
  /// A new stream on the current device.
  /// \throws cuda_error where no device exists or creation fails.
  stream();
  /// A new stream on `device`; the caller's current device is left unchanged.
  /// \throws std::invalid_argument for an ordinal out of range, cuda_error otherwise.
  explicit stream(int device);
  /// Waits for the work queued on the stream, then destroys it; a buffer
  /// still holding it as its stream is then freed on its resource's bound
  /// stream. Never throws.
  ~stream();

  stream(stream&& other) noexcept;
  stream& operator=(stream&& other) noexcept;
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;

  [[nodiscard]] cudaStream_t get() const noexcept { return handle_; }
  /// The ordinal of the device the stream belongs to.
  [[nodiscard]] int device() const noexcept { return device_; }
  /// Blocks until all work queued so far has completed. \throws cuda_error.
  void synchronize() const;
  [[nodiscard]] stream_ref ref() const noexcept { return stream_ref(handle_); }
  operator stream_ref() const noexcept { return ref(); }  // NOLINT(google-explicit-constructor)

 private:
  cudaStream_t handle_ = nullptr;
  int device_ = -1;
};

}  // namespace cudapmr
