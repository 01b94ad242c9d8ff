// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file error.hpp
/// Exceptions thrown by cudapmr and the one macro that checks CUDA calls.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <system_error>

namespace cudapmr {

/// The error category of `cudaError_t` values: `name()` is "cuda", messages are
/// CUDA's own name and text ("cudaErrorMemoryAllocation: out of memory").
const std::error_category& cuda_category() noexcept;

/// A CUDA call failed. `code().value()` is the `cudaError_t`; `what()` says
/// what was being done, CUDA's error name and text, and where.
class cuda_error : public std::system_error {
 public:
  /// \param error CUDA's answer.
  /// \param context what was asked ("cudaMemPoolCreate for device 0 at pool.cpp:42").
  cuda_error(cudaError_t error, std::string context);

  /// The CUDA error this exception carries.
  [[nodiscard]] cudaError_t error() const noexcept { return static_cast<cudaError_t>(code().value()); }
};

struct out_of_memory_report;

/// A resource could not satisfy a request. Derives from `std::bad_alloc`, as
/// the `std::pmr::memory_resource` contract requires.
class out_of_memory : public std::bad_alloc {
 public:
  /// \param bytes the size asked for.
  /// \param alignment the alignment asked for.
  /// \param resource the resource that refused ("device_memory_resource (device 0)").
  /// \param reason why, usually CUDA's answer.
  out_of_memory(std::size_t bytes, std::size_t alignment, std::string resource, std::string reason);
  /// The same refusal, explained: `what()` adds the report's text
  /// (`<cudapmr/memory_snapshot.hpp>` defines the report).
  out_of_memory(const out_of_memory& refusal, std::shared_ptr<const out_of_memory_report> report);
  /// `resource`'s refusal of its caller's request, which came from `cause`, a
  /// refusal below it: the message is `context` then `cause.what()`, and the
  /// report of `cause` stays with it.
  out_of_memory(std::size_t bytes, std::size_t alignment, std::string resource, std::string_view context,
                const out_of_memory& cause);

  [[nodiscard]] const char* what() const noexcept override { return message_.c_str(); }
  /// The size of the request that failed.
  [[nodiscard]] std::size_t requested_bytes() const noexcept { return bytes_; }
  /// What the observing stack saw at the refusal; null where no history_adaptor explained it.
  [[nodiscard]] const out_of_memory_report* report() const noexcept { return report_.get(); }

 private:
  std::size_t bytes_;
  std::string message_;
  std::shared_ptr<const out_of_memory_report> report_;
};

/// True when `error` means that no usable CUDA device or driver exists.
[[nodiscard]] bool is_no_device_error(cudaError_t error) noexcept;

namespace detail {
/// Clears CUDA's last-error state and throws `cuda_error` naming the call.
[[noreturn]] void throw_cuda_error(cudaError_t error, const char* call, const char* file, int line);
}  // namespace detail

}  // namespace cudapmr

/// Checks a CUDA runtime call; on failure throws `cudapmr::cuda_error` naming
/// the call, CUDA's answer and file:line. The message is built only on failure.
#define CUDAPMR_CHECK(call)                                                                     \
  do {                                                                                          \
    if (const cudaError_t cudapmr_status_ = (call); cudapmr_status_ != cudaSuccess)             \
      ::cudapmr::detail::throw_cuda_error(cudapmr_status_, #call, __FILE__, __LINE__);          \
  } while (false)
