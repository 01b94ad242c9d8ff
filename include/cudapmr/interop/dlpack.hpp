// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file dlpack.hpp
/// Hands cudapmr buffers to tensor libraries (PyTorch, CuPy, NumPy, JAX...)
/// through DLPack, and views DLPack tensors as typed spans.
///
/// Needs DLPack's C header (Debian's libdlpack-dev; in CMake,
/// `find_package(dlpack CONFIG REQUIRED)` and link `dlpack::dlpack`).

#include "cudapmr/buffer.hpp"
#include "cudapmr/memory_kind.hpp"
#include "cudapmr/stream_ordered_resource.hpp"

#include <dlpack/dlpack.h>

#include <complex>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>

namespace cudapmr {

/// The element types DLPack describes with one lane: integers other than
/// bool, float, double, and std::complex of float or double.
template <class T>
concept dlpack_element = (std::is_integral_v<T> && !std::is_same_v<T, bool>) || std::is_same_v<T, float> ||
                         std::is_same_v<T, double> || std::is_same_v<T, std::complex<float>> ||
                         std::is_same_v<T, std::complex<double>>;

/// The DLPack data type of `T`.
template <dlpack_element T>
inline constexpr DLDataType dlpack_dtype{
    static_cast<std::uint8_t>(std::is_integral_v<T> ? (std::is_signed_v<T> ? kDLInt : kDLUInt)
                              : std::is_floating_point_v<T> ? kDLFloat
                                                            : kDLComplex),
    static_cast<std::uint8_t>(sizeof(T) * 8), 1};

/// The DLPack device of memory of `kind` that belongs to `device_id`:
/// kDLCUDA and the device for device memory; kDLCUDAHost, kDLCUDAManaged and
/// kDLCPU, with id 0 as DLPack asks, for pinned, managed and pageable memory.
[[nodiscard]] DLDevice dlpack_device(memory_kind kind, int device_id) noexcept;

/// The memory kind of a DLPack device.
/// \throws std::invalid_argument naming the device type unless it is kDLCPU,
///   kDLCUDA, kDLCUDAHost or kDLCUDAManaged.
[[nodiscard]] memory_kind dlpack_memory_kind(DLDevice device);

namespace detail {

/// `count` as a DLPack extent. \throws std::invalid_argument if it exceeds int64_t.
[[nodiscard]] std::int64_t dlpack_extent(std::size_t count);

/// Describes the 1-D, contiguous tensor of `shape` elements of `dtype` at
/// `data`, drawn from `resource`, whose `deleter` frees `owner`.
void describe_dlpack_tensor(DLManagedTensor& tensor, void* data, std::int64_t* shape, DLDataType dtype,
                            const stream_ordered_resource& resource, void* owner,
                            void (*deleter)(DLManagedTensor*)) noexcept;

/// Checks that `tensor` holds `expected` elements on a known device (of
/// `required_kind`, if given), contiguous and aligned to `alignment`; returns
/// the address of its first element and the element count.
/// \throws std::invalid_argument naming what differs.
[[nodiscard]] std::pair<void*, std::size_t> checked_dlpack_view(const DLTensor& tensor, DLDataType expected,
                                                              std::size_t alignment,
                                                              std::optional<memory_kind> required_kind);

/// What a DLManagedTensor made by to_dlpack points to: the buffer it owns and
/// the storage of its shape.
template <class T>
struct dlpack_owner {
  explicit dlpack_owner(buffer<T>&& source, std::int64_t count) noexcept : owned(std::move(source)), shape(count) {}

  /// The DLPack deleter: closes the buffer on its stream. Never throws.
  static void destroy(DLManagedTensor* self) noexcept { delete static_cast<dlpack_owner*>(self->manager_ctx); }

  buffer<T> owned;
  std::int64_t shape;
  DLManagedTensor tensor{};
};

}  // namespace detail

/// Hands `source` over to a new DLManagedTensor: 1-D, contiguous, of
/// `source.size()` elements of T's dtype, on the DLPack device of the
/// buffer's kind. The tensor then owns the memory; its deleter, which the
/// receiver calls once when done (as DLPack asks), closes the buffer on the
/// buffer's stream (`set_stream` first to choose another). Nothing is
/// synchronized: work queued on the buffer's stream must be complete, or
/// ordered before the receiver's, before the receiver reads.
/// \throws std::invalid_argument for a closed or moved-from buffer (which is
///   then left as it was); std::bad_alloc.
template <dlpack_element T>
[[nodiscard]] DLManagedTensor* to_dlpack(buffer<T>&& source) {
  if (!source.is_open()) detail::throw_closed_buffer("to_dlpack");
  const std::int64_t count = detail::dlpack_extent(source.size());
  auto owner = std::make_unique<detail::dlpack_owner<T>>(std::move(source), count);
  detail::describe_dlpack_tensor(owner->tensor, owner->owned.data(), &owner->shape, dlpack_dtype<T>,
                                 *owner->owned.resource(), owner.get(), &detail::dlpack_owner<T>::destroy);
  return &owner.release()->tensor;
}

/// A typed, non-owning view of the elements of `tensor`, whose memory stays
/// with whoever made it. The tensor must hold T's dtype, on kDLCPU, kDLCUDA,
/// kDLCUDAHost or kDLCUDAManaged (of the `required` kind, if given),
/// contiguous in row-major order (any number of dimensions; strides absent or
/// compact), and aligned for T; its byte_offset is applied. Dereference the
/// span on the host only for host-accessible memory.
/// \throws std::invalid_argument naming the dtype, device, shape, strides or
///   address that does not fit.
template <class T>
  requires dlpack_element<std::remove_const_t<T>>
[[nodiscard]] std::span<T> view_dlpack(const DLManagedTensor& tensor, std::optional<memory_kind> required = {}) {
  const auto [data, count] =
      detail::checked_dlpack_view(tensor.dl_tensor, dlpack_dtype<std::remove_const_t<T>>, alignof(T), required);
  return {static_cast<T*>(data), count};
}

}  // namespace cudapmr
