// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file thrust_allocator.hpp
/// A Thrust allocator over any cudapmr resource, for `thrust::device_vector`
/// and for the temporary storage of Thrust algorithms.

#include "cudapmr/stream_ordered_resource.hpp"

#include <thrust/device_ptr.h>
#include <thrust/device_reference.h>
#include <thrust/execution_policy.h>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <new>

namespace cudapmr {

/// Allocates `T`s from a stream_ordered_resource in stream order on one
/// stream. Memory must be device-accessible for Thrust's kernels (device,
/// pinned or managed kinds). Copies share the resource and the stream; the
/// resource must outlive every copy.
///
/// - `thrust::device_vector<T, thrust_allocator<T>> v(n, allocator)` draws its
///   storage from the resource and constructs, copies and fills its elements
///   with `thrust::cuda::par.on(stream)`, which waits for them; it frees the
///   storage in stream order on `stream`, so work on other streams that reads
///   `v` must be complete before `v` goes away.
/// - `thrust::cuda::par_nosync(allocator).on(stream)` (or `thrust_policy`)
///   makes an algorithm draw its temporary storage from the resource; run it
///   on the allocator's own stream, since the storage is allocated and freed
///   in order there.
template <class T>
class thrust_allocator {
 public:
  using value_type = T;
  using pointer = thrust::device_ptr<T>;
  using const_pointer = thrust::device_ptr<const T>;
  using reference = thrust::device_reference<T>;
  using const_reference = thrust::device_reference<const T>;
  using size_type = std::size_t;
  using difference_type = std::ptrdiff_t;
  /// What Thrust's containers run element construction on: the allocator's stream.
  using system_type = thrust::cuda_cub::execute_on_stream;

  template <class U>
  struct rebind {
    using other = thrust_allocator<U>;
  };

  /// Allocates from `resource` in stream order on `stream`.
  thrust_allocator(stream_ordered_resource& resource, stream_ref stream) noexcept
      : resource_(&resource), stream_(stream), system_(stream.get()) {}

  /// The same resource and stream, for another element type.
  template <class U>
  thrust_allocator(const thrust_allocator<U>& other) noexcept  // NOLINT(google-explicit-constructor): allocators rebind implicitly
      : thrust_allocator(other.resource(), other.stream()) {}

  /// `count` uninitialized elements, usable by work queued on `stream()` afterwards.
  /// \throws std::bad_array_new_length if `count * sizeof(T)` overflows;
  ///   out_of_memory or cuda_error from the resource.
  [[nodiscard]] pointer allocate(size_type count) {
    if (count > max_size()) throw std::bad_array_new_length();
    return pointer(static_cast<T*>(resource_->allocate_async(count * sizeof(T), alignment(), stream_)));
  }

  /// Frees `p` (from `allocate(count)`) in stream order on `stream()`. Never throws.
  void deallocate(pointer p, size_type count) noexcept {
    resource_->deallocate_async(p.get(), count * sizeof(T), alignment(), stream_);
  }

  [[nodiscard]] size_type max_size() const noexcept { return std::numeric_limits<size_type>::max() / sizeof(T); }

  [[nodiscard]] stream_ordered_resource& resource() const noexcept { return *resource_; }
  [[nodiscard]] stream_ref stream() const noexcept { return stream_; }
  /// Thrust's hook for the execution policy of container element operations.
  [[nodiscard]] system_type& system() noexcept { return system_; }

  /// Equal when the resources are equal and the streams are the same: either
  /// can then free what the other allocated, in the same order.
  friend bool operator==(const thrust_allocator& left, const thrust_allocator& right) noexcept {
    return left.resource().is_equal(right.resource()) && left.stream() == right.stream();
  }

 private:
  static constexpr std::size_t alignment() noexcept { return std::max(default_alignment, alignof(T)); }

  stream_ordered_resource* resource_;
  stream_ref stream_;
  system_type system_;
};

/// The execution policy for Thrust algorithms that run on `stream` and draw
/// their temporary storage from `resource` on it: `thrust::cuda::par_nosync`,
/// so an algorithm may return before its kernels finish (one that returns a
/// value, such as `reduce`, still waits for it).
[[nodiscard]] inline auto thrust_policy(stream_ordered_resource& resource, stream_ref stream) {
  return thrust::cuda::par_nosync(thrust_allocator<std::byte>(resource, stream)).on(stream.get());
}

}  // namespace cudapmr
