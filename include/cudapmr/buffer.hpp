#pragma once
/// \file buffer.hpp
/// An owning, stream-ordered array drawn from a stream_ordered_resource.

#include "cudapmr/detail/buffer_operations.hpp"
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
        count_(count) {}

  /// Closes the buffer on its stream. Never throws.
  ~buffer() { close(); }

  buffer(buffer&& other) noexcept
      : resource_(std::exchange(other.resource_, nullptr)),
        stream_(other.stream_),
        data_(std::exchange(other.data_, nullptr)),
        count_(std::exchange(other.count_, 0)) {}

  buffer& operator=(buffer&& other) noexcept {
    if (this != &other) {
      close();
      resource_ = std::exchange(other.resource_, nullptr);
      stream_ = other.stream_;
      data_ = std::exchange(other.data_, nullptr);
      count_ = std::exchange(other.count_, 0);
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

  /// Copies all elements of `source` into this buffer, in stream order on `stream`.
  /// \throws std::invalid_argument if the sizes differ or either buffer is closed.
  void copy_from(const buffer& source, stream_ref stream) {
    require_open("copy_from (destination)");
    source.require_open("copy_from (source)");
    detail::check_copy_sizes("copy_from", count_, source.count_, sizeof(T));
    detail::copy_bytes(data_, is_pageable(), source.data_, source.is_pageable(), size_bytes(), stream);
  }

  /// Copies host memory into this buffer in stream order; `source` must stay
  /// alive until the copy completes. \throws std::invalid_argument on a size mismatch.
  void copy_from(std::span<const T> source, stream_ref stream) {
    require_open("copy_from (host span)");
    detail::check_copy_sizes("copy_from (host span)", count_, source.size(), sizeof(T));
    detail::copy_bytes(data_, is_pageable(), source.data(), true, size_bytes(), stream);
  }

  /// Copies this buffer into host memory in stream order; read `destination`
  /// after synchronizing `stream`. \throws std::invalid_argument on a size mismatch.
  void copy_to(std::span<T> destination, stream_ref stream) const {
    require_open("copy_to (host span)");
    detail::check_copy_sizes("copy_to (host span)", destination.size(), count_, sizeof(T));
    detail::copy_bytes(destination.data(), true, data_, is_pageable(), size_bytes(), stream);
  }

  /// Sets every element to `value`, in stream order on `stream`.
  void fill(const T& value, stream_ref stream) {
    require_open("fill");
    detail::fill_pattern(data_, count_, &value, sizeof(T), resource_->kind(), stream);
  }

  /// Frees the memory in stream order on `stream`; the buffer becomes empty.
  /// Closing a closed buffer does nothing. Never throws.
  void close(stream_ref stream) noexcept {
    if (resource_ == nullptr) return;
    resource_->deallocate_async(data_, size_bytes(), alignment(), stream);
    resource_ = nullptr;
    data_ = nullptr;
    count_ = 0;
  }
  /// Frees the memory on the buffer's own stream.
  void close() noexcept { close(stream_); }

 private:
  static constexpr std::size_t alignment() noexcept { return std::max(default_alignment, alignof(T)); }
  [[nodiscard]] bool is_pageable() const noexcept { return resource_->kind() == memory_kind::pageable; }
  void require_open(const char* operation) const {
    if (resource_ == nullptr) detail::throw_closed_buffer(operation);
  }

  stream_ordered_resource* resource_ = nullptr;
  stream_ref stream_{};
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

}  // namespace cudapmr
