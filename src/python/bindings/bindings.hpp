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
#include <memory>
#include <string>
#include <string_view>
#include <utility>

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

/// `text` as a Python str, where an ill-formed UTF-8 sequence (a path or a
/// symbol in a call stack) reads as U+FFFD; None where Python has no memory for it.
[[nodiscard]] nanobind::object text_of(std::string_view text);

/// The handle as Python sees it: an int.
[[nodiscard]] inline std::uintptr_t stream_int(stream_ref stream) noexcept {
  return reinterpret_cast<std::uintptr_t>(stream.get());
}

/// The memory of a Buffer and a reference to the Python object of its
/// resource, shared by the Buffer and each DLPack export of it: the last of
/// them to let go frees the memory in stream order on `memory`'s stream, from
/// any thread, with or without the GIL.
class shared_memory {
 public:
  /// Takes a reference to `resource_object`, whose resource `memory` came from.
  shared_memory(nanobind::handle resource_object, cudapmr::buffer<std::byte>&& memory) noexcept
      : memory(std::move(memory)), resource_object_(resource_object.inc_ref().ptr()) {}
  ~shared_memory();
  shared_memory(const shared_memory&) = delete;
  shared_memory& operator=(const shared_memory&) = delete;

  [[nodiscard]] nanobind::handle resource_object() const noexcept { return resource_object_; }

  cudapmr::buffer<std::byte> memory;

 private:
  PyObject* resource_object_;
};

/// A cudapmr buffer of bytes as Python holds it: its share of the memory
/// (null once closed) and the stream it frees on by default.
struct python_buffer {
  std::shared_ptr<shared_memory> shared;
  stream_ref stream;

  python_buffer(std::shared_ptr<shared_memory> memory, stream_ref on) noexcept
      : shared(std::move(memory)), stream(on) {}
  /// Closes on the buffer's stream (garbage collection).
  ~python_buffer() { close(stream); }
  python_buffer(const python_buffer&) = delete;
  python_buffer& operator=(const python_buffer&) = delete;

  /// Lets go of the memory, to be freed on `on` once no DLPack export holds it. Never throws.
  void close(stream_ref on) noexcept;
};

/// A new Buffer of `bytes` from `resource` (the Python object `owner`) on `stream`.
[[nodiscard]] python_buffer* allocate_buffer(nanobind::handle owner, stream_ordered_resource& resource,
                                             std::size_t bytes, nanobind::handle stream);

void bind_streams(nanobind::module_& module);
void bind_resources(nanobind::module_& module);
void bind_buffer(nanobind::module_& module);
void bind_observability(nanobind::module_& module);
void bind_torch_allocator(nanobind::module_& module);

}  // namespace cudapmr::python
