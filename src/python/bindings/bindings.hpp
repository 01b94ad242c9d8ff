// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file bindings.hpp
/// What the parts of the module cudapmr._cudapmr share: stream arguments and
/// the functions that add each part's classes.
#include <cudapmr/buffer.hpp>
#include <cudapmr/stream.hpp>
#include <cudapmr/stream_ordered_resource.hpp>

#include <nanobind/nanobind.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace cudapmr::python {

/// The CUDA stream a Python argument names: None (the legacy default stream,
/// 0), an int handle, an object with `__cuda_stream__` (cuda.core and the
/// CUDA stream protocol), or a CuPy (`ptr`) or PyTorch (`cuda_stream`) stream.
/// \throws nanobind::type_error naming the argument's type; nanobind::value_error for a negative handle.
[[nodiscard]] cudaStream_t stream_handle(nanobind::handle stream);

/// `bytes` from Python as a byte count.
/// \throws nanobind::value_error naming `operation` and the value when it is negative.
[[nodiscard]] inline std::size_t byte_count(std::int64_t bytes, const char* operation) {
  if (bytes < 0)
    throw nanobind::value_error(
        (std::string(operation) + ": nbytes " + std::to_string(bytes) + " is negative").c_str());
  return static_cast<std::size_t>(bytes);
}

/// The handle as Python sees it: an int.
[[nodiscard]] inline std::uintptr_t stream_int(stream_ref stream) noexcept {
  return reinterpret_cast<std::uintptr_t>(stream.get());
}

/// A cudapmr buffer of bytes as Python holds it: the buffer and the Python
/// object of its resource, which stays alive while the buffer is open.
struct python_buffer {
  nanobind::object resource_object;  // declared first, so released after `memory` closes
  cudapmr::buffer<std::byte> memory;
};

/// A new Buffer of `bytes` from `resource` (the Python object `owner`) on `stream`.
[[nodiscard]] python_buffer* allocate_buffer(nanobind::handle owner, stream_ordered_resource& resource,
                                             std::size_t bytes, nanobind::handle stream);

void bind_streams(nanobind::module_& module);
void bind_resources(nanobind::module_& module);
void bind_buffer(nanobind::module_& module);
void bind_torch_allocator(nanobind::module_& module);

}  // namespace cudapmr::python
