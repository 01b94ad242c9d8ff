// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/interop/dlpack.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace cudapmr {
namespace {

/// "float32", "int64", "complex128"; other codes by number.
std::string dtype_name(DLDataType dtype) {
  const char* code = nullptr;
  switch (dtype.code) {
    case kDLInt: code = "int"; break;
    case kDLUInt: code = "uint"; break;
    case kDLFloat: code = "float"; break;
    case kDLBfloat: code = "bfloat"; break;
    case kDLComplex: code = "complex"; break;
    default: break;
  }
  std::string name = code != nullptr ? fmt::format("{}{}", code, dtype.bits)
                                     : fmt::format("type code {} of {} bits", dtype.code, dtype.bits);
  if (dtype.lanes != 1) name += fmt::format(" x {} lanes", dtype.lanes);
  return name;
}

bool same_dtype(DLDataType left, DLDataType right) {
  return left.code == right.code && left.bits == right.bits && left.lanes == right.lanes;
}

/// The tensor's extents; \throws std::invalid_argument for a negative one or a missing shape.
std::vector<std::int64_t> extents(const DLTensor& tensor) {
  if (tensor.ndim < 0) throw std::invalid_argument(fmt::format("view_dlpack: ndim {} is negative", tensor.ndim));
  if (tensor.ndim > 0 && tensor.shape == nullptr)
    throw std::invalid_argument(fmt::format("view_dlpack: a tensor of {} dimensions has no shape", tensor.ndim));
  std::vector<std::int64_t> shape(tensor.shape, tensor.shape + tensor.ndim);
  for (const std::int64_t extent : shape)
    if (extent < 0) throw std::invalid_argument(fmt::format("view_dlpack: shape [{}] has a negative extent", fmt::join(shape, ", ")));
  return shape;
}

/// The number of elements of `shape`. \throws std::invalid_argument when it overflows size_t.
std::size_t element_count(const std::vector<std::int64_t>& shape) {
  std::size_t count = 1;
  for (const std::int64_t extent : shape) {
    const auto size = static_cast<std::size_t>(extent);
    if (size != 0 && count > std::numeric_limits<std::size_t>::max() / size)
      throw std::invalid_argument(fmt::format("view_dlpack: shape [{}] holds more elements than size_t counts", fmt::join(shape, ", ")));
    count *= size;
  }
  return count;
}

/// \throws std::invalid_argument unless the strides are absent or row-major
/// compact; a dimension of extent 1 may have any stride, as it is never stepped.
void require_contiguous(const DLTensor& tensor, const std::vector<std::int64_t>& shape) {
  if (tensor.strides == nullptr) return;
  const std::vector<std::int64_t> strides(tensor.strides, tensor.strides + tensor.ndim);
  std::vector<std::int64_t> compact(shape.size());
  std::int64_t expected = 1;
  bool contiguous = true;
  for (std::size_t i = shape.size(); i-- > 0;) {
    compact[i] = expected;
    contiguous = contiguous && (shape[i] == 1 || strides[i] == expected);
    expected *= shape[i];
  }
  if (!contiguous && expected != 0)
    throw std::invalid_argument(fmt::format(
        "view_dlpack: the tensor of shape [{}] with strides [{}] is not contiguous in row-major order (that needs strides [{}])",
        fmt::join(shape, ", "), fmt::join(strides, ", "), fmt::join(compact, ", ")));
}

const char* device_type_name(DLDeviceType type) {
  switch (type) {
    case kDLCPU: return "kDLCPU";
    case kDLCUDA: return "kDLCUDA";
    case kDLCUDAHost: return "kDLCUDAHost";
    case kDLCUDAManaged: return "kDLCUDAManaged";
    default: return "unknown";
  }
}

}  // namespace

DLDevice dlpack_device(memory_kind kind, int device_id) noexcept {
  switch (kind) {
    case memory_kind::device: return {kDLCUDA, device_id};
    case memory_kind::pinned: return {kDLCUDAHost, 0};
    case memory_kind::managed: return {kDLCUDAManaged, 0};
    case memory_kind::pageable: return {kDLCPU, 0};
  }
  return {kDLCPU, 0};
}

memory_kind dlpack_memory_kind(DLDevice device) {
  switch (device.device_type) {
    case kDLCUDA: return memory_kind::device;
    case kDLCUDAHost: return memory_kind::pinned;
    case kDLCUDAManaged: return memory_kind::managed;
    case kDLCPU: return memory_kind::pageable;
    default:
      throw std::invalid_argument(fmt::format(
          "DLPack device type {} (device id {}) is none that cudapmr knows: kDLCPU (1), kDLCUDA (2), kDLCUDAHost (3), "
          "kDLCUDAManaged (13)",
          static_cast<int>(device.device_type), device.device_id));
  }
}

namespace detail {

std::int64_t dlpack_extent(std::size_t count) {
  if (count > static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max()))
    throw std::invalid_argument(fmt::format("to_dlpack: {} elements exceed DLPack's int64_t extent", count));
  return static_cast<std::int64_t>(count);
}

void describe_dlpack_tensor(DLManagedTensor& tensor, void* data, std::int64_t* shape, DLDataType dtype,
                            const stream_ordered_resource& resource, void* owner,
                            void (*deleter)(DLManagedTensor*)) noexcept {
  tensor.dl_tensor.data = data;
  tensor.dl_tensor.device = dlpack_device(resource.kind(), resource.device_id());
  tensor.dl_tensor.ndim = 1;
  tensor.dl_tensor.dtype = dtype;
  tensor.dl_tensor.shape = shape;
  tensor.dl_tensor.strides = nullptr;  // compact, row-major
  tensor.dl_tensor.byte_offset = 0;
  tensor.manager_ctx = owner;
  tensor.deleter = deleter;
}

std::pair<void*, std::size_t> checked_dlpack_view(const DLTensor& tensor, DLDataType expected, std::size_t alignment,
                                                  std::optional<memory_kind> required_kind) {
  if (!same_dtype(tensor.dtype, expected))
    throw std::invalid_argument(fmt::format("view_dlpack: the tensor holds {}, but the view is of {}",
                                            dtype_name(tensor.dtype), dtype_name(expected)));
  const memory_kind kind = dlpack_memory_kind(tensor.device);
  if (required_kind && kind != *required_kind)
    throw std::invalid_argument(fmt::format("view_dlpack: the tensor is in {} memory ({}, device id {}), but {} memory is required",
                                            to_string(kind), device_type_name(tensor.device.device_type),
                                            tensor.device.device_id, to_string(*required_kind)));
  const std::vector<std::int64_t> shape = extents(tensor);
  const std::size_t count = element_count(shape);
  require_contiguous(tensor, shape);
  if (count == 0) return {nullptr, 0};
  if (tensor.data == nullptr)
    throw std::invalid_argument(fmt::format("view_dlpack: the tensor of shape [{}] has no data", fmt::join(shape, ", ")));
  const auto address = reinterpret_cast<std::uintptr_t>(tensor.data) + tensor.byte_offset;
  if (address % alignment != 0)
    throw std::invalid_argument(fmt::format("view_dlpack: the first element, at {:#x} (data plus byte_offset {}), is not aligned to {} bytes",
                                            address, tensor.byte_offset, alignment));
  return {reinterpret_cast<void*>(address), count};
}

}  // namespace detail
}  // namespace cudapmr
