// SPDX-License-Identifier: Apache-2.0
#pragma once
// The library's one way to check a CUDA call, chosen by what a failure means
// where the call is made:
//
// - CUDAPMR_CHECK(call) (error.hpp): the failure is the caller's to handle:
//   throws cuda_error naming the call and where it was made.
// - check_cuda(status, describe): the same, with a context built only on failure.
// - check_cuda_allocation(status, ...): an allocation: cudaErrorMemoryAllocation
//   becomes out_of_memory naming the request and the resource.
// - recover_from(status): a failure the code answers itself (a query's "no",
//   a fallback).
// - CUDAPMR_ASSERT_CUDA_SUCCESS(call): a path that must not throw (frees,
//   destructors); debug builds stop on a failure a release should never meet.
//
// Each clears CUDA's last error after a failure, so that the next, unrelated
// call does not report it; nothing else in the library reads cudaGetLastError.

#include "cudapmr/error.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <utility>

namespace cudapmr::detail {

/// Unless `status` is cudaSuccess: clears CUDA's last error and throws
/// cuda_error with the context `describe()` builds (only on failure).
template <class Describe>
void check_cuda(cudaError_t status, Describe&& describe) {
  if (status != cudaSuccess) [[unlikely]] {
    static_cast<void>(cudaGetLastError());
    throw cuda_error(status, std::forward<Describe>(describe)());
  }
}

/// As check_cuda, for an allocation of `bytes` (alignment `alignment`) from the
/// resource `resource()` names: cudaErrorMemoryAllocation throws out_of_memory.
template <class Resource, class Describe>
void check_cuda_allocation(cudaError_t status, std::size_t bytes, std::size_t alignment, Resource&& resource,
                           Describe&& describe) {
  if (status == cudaSuccess) [[likely]]
    return;
  static_cast<void>(cudaGetLastError());
  if (status == cudaErrorMemoryAllocation)
    throw out_of_memory(bytes, alignment, std::forward<Resource>(resource)(),
                        fmt::format("{}: {}", cudaGetErrorName(status), cudaGetErrorString(status)));
  throw cuda_error(status, std::forward<Describe>(describe)());
}

/// For a failure the caller answers itself: clears it; returns whether the call succeeded.
[[nodiscard]] inline bool recover_from(cudaError_t status) noexcept {
  if (status == cudaSuccess) [[likely]]
    return true;
  static_cast<void>(cudaGetLastError());
  return false;
}

/// Failures a path that cannot throw may meet with no bug anywhere: CUDA
/// shutting down at exit, or no usable device.
[[nodiscard]] constexpr bool may_fail_in_release(cudaError_t status) noexcept {
  return status == cudaErrorCudartUnloading || status == cudaErrorContextIsDestroyed ||
         status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver ||
         status == cudaErrorDeviceUninitialized;
}

/// CUDAPMR_ASSERT_CUDA_SUCCESS's work: clears a failure; in debug builds,
/// stops the program on one that `may_fail_in_release` does not allow.
inline void assert_cuda_success(cudaError_t status, [[maybe_unused]] const char* call, [[maybe_unused]] const char* file,
                                [[maybe_unused]] int line) noexcept {
  if (status == cudaSuccess) [[likely]]
    return;
  static_cast<void>(cudaGetLastError());
#ifndef NDEBUG
  if (!may_fail_in_release(status)) {
    std::fprintf(stderr, "cudapmr: %s failed at %s:%d, where it cannot be reported: %s\n", call, file, line,
                 cudaGetErrorName(status));
    std::abort();
  }
#endif
}

}  // namespace cudapmr::detail

/// For calls on paths that must not throw (frees, destructors); see above.
#define CUDAPMR_ASSERT_CUDA_SUCCESS(call) ::cudapmr::detail::assert_cuda_success((call), #call, __FILE__, __LINE__)
