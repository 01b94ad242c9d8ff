// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file buffer.hpp
/// An owning, stream-ordered array drawn from a stream_ordered_resource.

#include "cudapmr/current_resource.hpp"
#include "cudapmr/detail/buffer_operations.hpp"
#include "cudapmr/detail/managed_operations.hpp"
#include "cudapmr/stream_ordered_resource.hpp"

#include <algorithm>
#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>

namespace cudapmr {

/// `count` elements of `T` allocated from a resource on a stream: a pmr-backed
/// span that frees itself, in stream order, when closed or destroyed.
///
/// All operations are stream-ordered: they are queued on the stream given and
/// may still be running when the call returns. A closed or moved-from buffer
/// is empty and owns nothing; using it for a copy or fill throws.
template <class T>
class buffer {
  static_assert(std::is_trivially_copyable_v<T>, "buffer<T> needs a trivially copyable T");

 public:
  using value_type = T;
  using size_type = std::size_t;

  /// An empty, closed buffer.
  buffer() noexcept = default;

  /// Allocates `count` elements from `resource` in stream order on `stream`;
  /// the buffer is later freed on `stream` unless closed on another.
  /// \throws std::invalid_argument if `count * sizeof(T)` overflows;
  ///   out_of_memory or cuda_error from the resource.
  buffer(stream_ordered_resource& resource, std::size_t count, stream_ref stream)
      : resource_(&resource),
        stream_(stream),
        data_(static_cast<T*>(
            resource.allocate_async(detail::checked_byte_count(count, sizeof(T)), alignment(), stream))),
        count_(count),
        resource_identity_(resource.identity()) {}

  /// Allocates `count` elements from `current_device_resource()`, as above.
  /// \throws as above; cuda_error where no device exists.
  buffer(std::size_t count, stream_ref stream) : buffer(current_device_resource(), count, stream) {}

  /// Closes the buffer on its stream. Never throws.
  ~buffer() { close(); }

  buffer(buffer&& other) noexcept
      : resource_(std::exchange(other.resource_, nullptr)),
        stream_(other.stream_),
        data_(std::exchange(other.data_, nullptr)),
        count_(std::exchange(other.count_, 0)),
        resource_identity_(other.resource_identity_) {}

  buffer& operator=(buffer&& other) noexcept {
    if (this != &other) {
      close();
      resource_ = std::exchange(other.resource_, nullptr);
      stream_ = other.stream_;
      data_ = std::exchange(other.data_, nullptr);
      count_ = std::exchange(other.count_, 0);
      resource_identity_ = other.resource_identity_;
    }
    return *this;
  }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;

  [[nodiscard]] T* data() noexcept { return data_; }
  [[nodiscard]] const T* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  [[nodiscard]] std::size_t size_bytes() const noexcept { return count_ * sizeof(T); }
  [[nodiscard]] bool empty() const noexcept { return count_ == 0; }
  /// False once closed or moved from.
  [[nodiscard]] bool is_open() const noexcept { return resource_ != nullptr; }
  /// A view of the elements; dereference it on the host only for host-accessible kinds.
  [[nodiscard]] std::span<T> span() noexcept { return {data_, count_}; }
  [[nodiscard]] std::span<const T> span() const noexcept { return {data_, count_}; }

  /// The stream the buffer was allocated on and will be freed on.
  [[nodiscard]] stream_ref stream() const noexcept { return stream_; }
  /// Makes later default closes (and the destructor) free on `stream`.
  void set_stream(stream_ref stream) noexcept { stream_ = stream; }
  /// The resource the memory came from; null once closed or moved from.
  [[nodiscard]] stream_ordered_resource* resource() const noexcept { return resource_; }

  /// Copies all elements into `destination`, in stream order on `stream`.
  /// \throws std::invalid_argument if the sizes differ or either buffer is closed.
  void copy_to(buffer& destination, stream_ref stream) const { destination.copy_from(*this, stream); }

  /// Copies all elements of `source` into this buffer, in stream order on `stream`;
  /// between two devices' memory, peer to peer where they reach each other, else through pinned memory.
  /// \throws std::invalid_argument if the sizes differ or either buffer is closed.
  void copy_from(const buffer& source, stream_ref stream) {
    require_open("copy_from (destination)");
    source.require_open("copy_from (source)");
    detail::check_copy_sizes("copy_from", count_, source.count_, sizeof(T));
    detail::copy_bytes(data_, as_copy_end(), source.data_, source.as_copy_end(), size_bytes(), stream);
  }

  /// Copies host memory into this buffer in stream order; `source` must stay
  /// alive until the copy completes. From pageable memory (not pinned) the
  /// call returns only once `source` has been read, so it may be reused at
  /// once; copies of 1 MiB or more from pageable memory into device or managed
  /// memory go through pinned staging, several times faster than the driver.
  /// \throws std::invalid_argument on a size mismatch; cuda_error.
  void copy_from(std::span<const T> source, stream_ref stream) {
    require_open("copy_from (host span)");
    detail::check_copy_sizes("copy_from (host span)", count_, source.size(), sizeof(T));
    detail::copy_bytes(data_, as_copy_end(), source.data(), host_span_end, size_bytes(), stream);
  }

  /// Copies this buffer into host memory in stream order; read `destination`
  /// after synchronizing `stream`. Into pageable memory (not pinned) the call
  /// returns once the data is there, so it waits for earlier work on `stream`;
  /// copies of 1 MiB or more from device or managed memory go through pinned
  /// staging, several times faster than the driver.
  /// \throws std::invalid_argument on a size mismatch; cuda_error.
  void copy_to(std::span<T> destination, stream_ref stream) const {
    require_open("copy_to (host span)");
    detail::check_copy_sizes("copy_to (host span)", destination.size(), count_, sizeof(T));
    detail::copy_bytes(destination.data(), host_span_end, data_, as_copy_end(), size_bytes(), stream);
  }

  /// Sets every element to `value`, in stream order on `stream`.
  void fill(const T& value, stream_ref stream) {
    require_open("fill");
    detail::fill_pattern(data_, count_, &value, sizeof(T), resource_->kind(), stream);
  }

  /// Migrates a managed buffer's memory to `device` in stream order on
  /// `stream`, so that kernels there do not fault on it.
  /// \throws std::invalid_argument naming the kind for a buffer that is not
  ///   managed, or for a device out of range; cuda_error.
  void prefetch_to_device(int device, stream_ref stream) const {
    require_managed("prefetch_to_device");
    detail::prefetch_managed(data_, size_bytes(), memory_location::device(device), stream, "prefetch_to_device");
  }
  /// Migrates a managed buffer's memory to the host in stream order on
  /// `stream`; synchronize before the host reads it. \throws as prefetch_to_device.
  void prefetch_to_host(stream_ref stream) const {
    require_managed("prefetch_to_host");
    detail::prefetch_managed(data_, size_bytes(), memory_location::host(), stream, "prefetch_to_host");
  }
  /// Gives `advice` about a managed buffer's memory for `location` (ignored by
  /// the read-mostly advice); takes effect at once. \throws as prefetch_to_device.
  void advise(managed_advice advice, memory_location location = memory_location::host()) const {
    require_managed("advise");
    detail::advise_managed(data_, size_bytes(), advice, location, "advise");
  }

  /// Frees the memory in stream order on `stream`; the buffer becomes empty.
  /// Closing a closed buffer does nothing. Never throws. Closed late, after
  /// its resource was destroyed, the buffer leaks its memory with one line on
  /// stderr; on a destroyed cudapmr::stream, it frees on the resource's bound
  /// stream.
  void close(stream_ref stream) noexcept {
    if (resource_ == nullptr) return;
    detail::close_buffer(resource_, resource_identity_, data_, size_bytes(), alignment(), stream);
    resource_ = nullptr;
    data_ = nullptr;
    count_ = 0;
  }
  /// Frees the memory on the buffer's own stream.
  void close() noexcept { close(stream_); }

 private:
  static constexpr std::size_t alignment() noexcept { return std::max(default_alignment, alignof(T)); }
  /// This buffer as one end of a copy; a host span is the other kind of end.
  [[nodiscard]] detail::copy_end as_copy_end() const noexcept { return {resource_->kind(), resource_->device_id()}; }
  static constexpr detail::copy_end host_span_end{memory_kind::pageable, -1};
  void require_open(const char* operation) const {
    if (resource_ == nullptr) detail::throw_closed_buffer(operation);
  }
  void require_managed(const char* operation) const {
    require_open(operation);
    detail::require_managed_kind(resource_->kind(), operation);
  }

  stream_ordered_resource* resource_ = nullptr;
  stream_ref stream_{};
  T* data_ = nullptr;
  std::size_t count_ = 0;
  detail::resource_identity resource_identity_ = 0;  // to tell, at close, that the resource is gone
};

}  // namespace cudapmr
