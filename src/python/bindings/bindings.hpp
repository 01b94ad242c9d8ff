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
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cudapmr::python {

/// The CUDA stream a Python argument names: None (the legacy default stream,
/// 0), an int handle, an object with `__cuda_stream__` (cuda.core and the
/// CUDA stream protocol), or a CuPy (`ptr`) or PyTorch (`cuda_stream`) stream.
/// \throws nanobind::type_error naming the argument's type; nanobind::value_error for a negative handle.
[[nodiscard]] cudaStream_t stream_handle(nanobind::handle stream);

/// A count (bytes, entries, an alignment) as Python passes it: any int, or an
/// object with `__index__` such as NumPy's integers. It is checked where it is
/// used, so that a negative or too large value is refused with a ValueError
/// naming the argument and the value (a std::size_t parameter would give
/// nanobind's TypeError, which names neither).
struct count {
  nanobind::object value;  // an int, or an object with __index__ (read in get)

  /// The value as a std::size_t.
  /// \throws nanobind::value_error "WHAT VALUE is negative" or "WHAT VALUE is past 2**64 - 1";
  ///   what the object's __index__ raises.
  [[nodiscard]] std::size_t get(const char* what) const;
};

/// `value` as a std::size_t where it is given; nothing for None.
[[nodiscard]] inline std::optional<std::size_t> get(const std::optional<count>& value, const char* what) {
  if (!value) return std::nullopt;
  return value->get(what);
}

/// `text` as a Python str, where an ill-formed UTF-8 sequence (a path or a
/// symbol in a call stack) reads as U+FFFD; None where Python has no memory for it.
[[nodiscard]] nanobind::object text_of(std::string_view text);

/// `text`'s UTF-8 bytes, a lone surrogate among them as Python's
/// "surrogatepass" writes it: names reach the exports, which write each
/// ill-formed sequence as U+FFFD, instead of being refused.
[[nodiscard]] std::string utf8_of(const nanobind::str& text);

/// The handle as Python sees it: an int.
[[nodiscard]] inline std::uintptr_t stream_int(stream_ref stream) noexcept {
  return reinterpret_cast<std::uintptr_t>(stream.get());
}

/// A call stack as Python sees it: a list of return addresses (ints), innermost first.
[[nodiscard]] inline nanobind::list return_addresses(const std::vector<void*>& call_stack) {
  nanobind::list frames;
  for (void* frame : call_stack) frames.append(reinterpret_cast<std::uintptr_t>(frame));
  return frames;
}

/// `to_dict` of each of `items`, in order, as a Python list.
template <class Items, class ToDict>
[[nodiscard]] nanobind::list dicts_of(const Items& items, ToDict to_dict) {
  nanobind::list result;
  for (const auto& item : items) result.append(to_dict(item));
  return result;
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

namespace nanobind::detail {
/// Takes any integer but a bool for a cudapmr::python::count; anything else
/// is no match (nanobind's TypeError, as for a std::size_t).
template <>
struct type_caster<cudapmr::python::count> {
  NB_TYPE_CASTER(cudapmr::python::count, const_name("int"))

  bool from_python(handle source, uint8_t, cleanup_list*) noexcept {
    // A bool is no count; an __index__ that raises raises from get(), where the error can reach the caller.
    if (PyBool_Check(source.ptr()) || !PyIndex_Check(source.ptr())) return false;
    value.value = borrow(source);
    return true;
  }

  static handle from_cpp(const cudapmr::python::count& given, rv_policy, cleanup_list*) noexcept {
    return given.value.inc_ref();
  }
};
}  // namespace nanobind::detail
