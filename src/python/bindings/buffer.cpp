// SPDX-License-Identifier: Apache-2.0
// Buffer: bytes from a resource, stream-ordered copies and fills, and the
// DLPack protocol (1.0, and the legacy capsule for older consumers).
#include "bindings.hpp"

#include <cudapmr/device.hpp>
#include <cudapmr/error.hpp>
#include <cudapmr/interop/dlpack.hpp>

#include <dlpack/dlpack.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace nb = nanobind;
using namespace nb::literals;

namespace cudapmr::python {
namespace {

// DLPack 1.0's versioned tensor, declared here where the installed header is older.
#ifndef DLPACK_MAJOR_VERSION
struct DLPackVersion {
  std::uint32_t major;
  std::uint32_t minor;
};
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  std::uint64_t flags;
  DLTensor dl_tensor;
};
#endif

constinit const char* const legacy_capsule_name = "dltensor";
constinit const char* const versioned_capsule_name = "dltensor_versioned";

/// What a capsule's tensor points to: a reference to the Python Buffer, so
/// that the memory stays while the consumer holds it, and the shape.
struct dlpack_owner {
  PyObject* buffer;
  std::int64_t shape;
  DLManagedTensor legacy{};
  DLManagedTensorVersioned versioned{};

  /// Drops the reference to the Buffer; any thread, with or without the GIL.
  static void release(dlpack_owner* owner) noexcept {
    if (Py_IsInitialized()) {
      const PyGILState_STATE state = PyGILState_Ensure();
      Py_DECREF(owner->buffer);
      PyGILState_Release(state);
    }
    delete owner;
  }
  static void delete_legacy(DLManagedTensor* tensor) noexcept {
    release(static_cast<dlpack_owner*>(tensor->manager_ctx));
  }
  static void delete_versioned(DLManagedTensorVersioned* tensor) noexcept {
    release(static_cast<dlpack_owner*>(tensor->manager_ctx));
  }
};

/// A capsule that dies still under its first name was never consumed: its
/// tensor (a `Tensor` named `name`) is still ours to delete.
template <class Tensor, const char* const* name>
void destroy_unconsumed_capsule(PyObject* capsule) noexcept {
  if (!PyCapsule_IsValid(capsule, *name)) return;
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  auto* tensor = static_cast<Tensor*>(PyCapsule_GetPointer(capsule, *name));
  if (tensor != nullptr && tensor->deleter != nullptr) tensor->deleter(tensor);
  PyErr_Restore(type, value, traceback);
}

python_buffer& open_buffer(python_buffer& self, const char* operation) {
  if (!self.memory.is_open()) detail::throw_closed_buffer(operation);
  return self;
}

/// The DLPack device of the buffer's memory.
DLDevice device_of(const python_buffer& self) {
  const stream_ordered_resource& resource = *self.memory.resource();
  return dlpack_device(resource.kind(), resource.device_id());
}

/// Orders the consumer's `stream` (DLPack's convention: None the legacy
/// default stream, 1 legacy, 2 per-thread, -1 no ordering) after the work
/// queued on the buffer's stream. Host-accessible memory with no stream named
/// is read by the host, so the buffer's stream is waited for.
void order_for_consumer(python_buffer& self, nb::handle stream) {
  const stream_ordered_resource& resource = *self.memory.resource();
  if (resource.kind() == memory_kind::pageable) return;
  cudaStream_t consumer = nullptr;
  if (stream.is_none()) {
    if (resource.is_host_accessible()) {
      nb::gil_scoped_release unlocked;
      CUDAPMR_CHECK(cudaStreamSynchronize(self.memory.stream().get()));
      return;
    }
    consumer = cudaStreamLegacy;
  } else {
    if (PyLong_Check(stream.ptr())) {
      int overflow = 0;  // a handle past LLONG_MAX overflows and is taken as a handle below
      const long long value = PyLong_AsLongLongAndOverflow(stream.ptr(), &overflow);
      if (value == -1 && PyErr_Occurred()) throw nb::python_error();
      if (overflow == 0 && value == -1) return;
      if (overflow == 0 && value == 0)
        throw nb::value_error("DLPack stream 0 is ambiguous for CUDA; pass 1 (legacy default), 2 (per-thread "
                              "default), a stream handle, or -1 for no ordering");
      if (overflow == 0 && value == 1) consumer = cudaStreamLegacy;
      else if (overflow == 0 && value == 2) consumer = cudaStreamPerThread;
      else consumer = stream_handle(stream);
    } else {
      consumer = stream_handle(stream);
    }
  }
  const cudaStream_t producer = self.memory.stream().get();
  if (consumer == producer) return;
  cudaEvent_t ready = nullptr;
  CUDAPMR_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  const cudaError_t recorded = cudaEventRecord(ready, producer);
  const cudaError_t waited = recorded == cudaSuccess ? cudaStreamWaitEvent(consumer, ready, 0) : recorded;
  static_cast<void>(cudaEventDestroy(ready));
  CUDAPMR_CHECK(waited);
}

/// The DLPack capsule of the buffer: 1-D uint8, versioned when the consumer
/// takes version 1 or later.
nb::object to_capsule(nb::handle self_object, nb::handle stream, std::optional<std::pair<int, int>> max_version,
                      std::optional<std::pair<int, int>> dl_device, std::optional<bool> copy) {
  python_buffer& self = open_buffer(nb::cast<python_buffer&>(self_object), "__dlpack__");
  if (copy && *copy)
    throw nb::buffer_error("cudapmr.Buffer.__dlpack__: copy=True is not supported; the memory is shared");
  DLDevice device = device_of(self);
  if (dl_device && (dl_device->first != device.device_type || dl_device->second != device.device_id)) {
    const bool host_wanted = dl_device->first == kDLCPU;
    if (!(host_wanted && self.memory.resource()->is_host_accessible()))
      throw nb::buffer_error(("cudapmr.Buffer.__dlpack__: the memory is on DLPack device (" +
                              std::to_string(device.device_type) + ", " + std::to_string(device.device_id) +
                              "), not (" + std::to_string(dl_device->first) + ", " +
                              std::to_string(dl_device->second) + "), and is not copied")
                                 .c_str());
    device = DLDevice{kDLCPU, 0};
  }
  order_for_consumer(self, stream);

  auto* owner = new dlpack_owner{self_object.ptr(), detail::dlpack_extent(self.memory.size())};
  Py_INCREF(owner->buffer);
  DLTensor tensor{};
  tensor.data = self.memory.data();
  tensor.device = device;
  tensor.ndim = 1;
  tensor.dtype = DLDataType{kDLUInt, 8, 1};
  tensor.shape = &owner->shape;
  tensor.strides = nullptr;
  tensor.byte_offset = 0;

  const bool versioned = max_version && max_version->first >= 1;
  PyObject* capsule = nullptr;
  if (versioned) {
    owner->versioned = DLManagedTensorVersioned{{1, 0}, owner, &dlpack_owner::delete_versioned, 0, tensor};
    capsule = PyCapsule_New(&owner->versioned, versioned_capsule_name, &destroy_unconsumed_capsule<DLManagedTensorVersioned, &versioned_capsule_name>);
  } else {
    owner->legacy = DLManagedTensor{tensor, owner, &dlpack_owner::delete_legacy};
    capsule = PyCapsule_New(&owner->legacy, legacy_capsule_name, &destroy_unconsumed_capsule<DLManagedTensor, &legacy_capsule_name>);
  }
  if (capsule == nullptr) {
    dlpack_owner::release(owner);
    throw nb::python_error();
  }
  return nb::steal(capsule);
}

/// A contiguous view of a Python object's memory (the buffer protocol).
class host_view {
 public:
  host_view(nb::handle object, bool writable) {
    if (PyObject_GetBuffer(object.ptr(), &view_, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) != 0)
      throw nb::python_error();
  }
  ~host_view() { PyBuffer_Release(&view_); }
  host_view(const host_view&) = delete;
  host_view& operator=(const host_view&) = delete;
  [[nodiscard]] void* data() const noexcept { return view_.buf; }
  [[nodiscard]] std::size_t bytes() const noexcept { return static_cast<std::size_t>(view_.len); }

 private:
  Py_buffer view_{};
};

constexpr detail::copy_end host_end{memory_kind::pageable, -1};

detail::copy_end end_of(const python_buffer& buffer) {
  return {buffer.memory.resource()->kind(), buffer.memory.resource()->device_id()};
}

/// The stream an operation runs on: the one named, else the buffer's own.
stream_ref operation_stream(const python_buffer& self, nb::handle stream) {
  return stream.is_none() ? self.memory.stream() : stream_ref(stream_handle(stream));
}

/// Copies `bytes` in stream order without the GIL: a copy to or from pageable
/// memory waits for the stream. The caller keeps both ends alive.
void copy_unlocked(void* destination, detail::copy_end destination_end, const void* source,
                   detail::copy_end source_end, std::size_t bytes, stream_ref stream) {
  nb::gil_scoped_release unlocked;
  detail::copy_bytes(destination, destination_end, source, source_end, bytes, stream);
}

void copy_between(python_buffer& destination, python_buffer& source, nb::handle stream, const char* operation) {
  open_buffer(destination, operation);
  open_buffer(source, operation);
  detail::check_copy_sizes(operation, destination.memory.size(), source.memory.size(), 1);
  copy_unlocked(destination.memory.data(), end_of(destination), source.memory.data(), end_of(source),
                source.memory.size(), operation_stream(source, stream));
}

std::string buffer_repr(const python_buffer& self) {
  if (!self.memory.is_open()) return "<cudapmr.Buffer closed>";
  return "<cudapmr.Buffer " + std::to_string(self.memory.size()) + " bytes at " +
         std::to_string(reinterpret_cast<std::uintptr_t>(self.memory.data())) + " from " +
         self.memory.resource()->description() + ">";
}

}  // namespace

python_buffer* allocate_buffer(nb::handle owner, stream_ordered_resource& resource, std::size_t bytes,
                               nb::handle stream) {
  return new python_buffer{nb::borrow(owner), cudapmr::buffer<std::byte>(resource, bytes, stream_handle(stream))};
}

void bind_buffer(nb::module_& module) {
  nb::class_<python_buffer>(module, "Buffer",
                            "Bytes from a memory resource, freed in stream order when closed (or collected).")
      .def_prop_ro("handle",
                   [](const python_buffer& self) { return reinterpret_cast<std::uintptr_t>(self.memory.data()); },
                   "The address of the memory (an int); 0 once closed.")
      .def_prop_ro("ptr",
                   [](const python_buffer& self) { return reinterpret_cast<std::uintptr_t>(self.memory.data()); })
      .def_prop_ro("size", [](const python_buffer& self) { return self.memory.size(); }, "Bytes; 0 once closed.")
      .def("__len__", [](const python_buffer& self) { return self.memory.size(); })
      .def_prop_ro("stream", [](const python_buffer& self) { return stream_int(self.memory.stream()); },
                   "The stream it was allocated on and is freed on by default (an int handle).")
      .def("set_stream",
           [](python_buffer& self, nb::handle stream) { self.memory.set_stream(stream_handle(stream)); },
           "stream"_a.none())
      .def_prop_ro("is_open", [](const python_buffer& self) { return self.memory.is_open(); })
      .def_prop_ro("memory_resource",
                   [](const python_buffer& self) { return self.memory.is_open() ? self.resource_object : nb::none(); })
      .def_prop_ro("kind",
                   [](python_buffer& self) {
                     return std::string(to_string(open_buffer(self, "kind").memory.resource()->kind()));
                   })
      .def_prop_ro("device_id",
                   [](python_buffer& self) { return open_buffer(self, "device_id").memory.resource()->device_id(); })
      .def_prop_ro("is_device_accessible",
                   [](python_buffer& self) {
                     return open_buffer(self, "is_device_accessible").memory.resource()->is_device_accessible();
                   })
      .def_prop_ro("is_host_accessible",
                   [](python_buffer& self) {
                     return open_buffer(self, "is_host_accessible").memory.resource()->is_host_accessible();
                   })
      .def(
          "copy_to",
          [](nb::handle self_object, nb::handle destination, nb::handle stream) -> nb::object {
            python_buffer& self = open_buffer(nb::cast<python_buffer&>(self_object), "copy_to");
            if (destination.is_none()) {
              nb::object fresh = nb::cast(
                  allocate_buffer(self.resource_object, *self.memory.resource(), self.memory.size(),
                                  nb::int_(stream_int(operation_stream(self, stream)))),
                  nb::rv_policy::take_ownership);
              copy_between(nb::cast<python_buffer&>(fresh), self, stream, "copy_to");
              return fresh;
            }
            if (nb::isinstance<python_buffer>(destination)) {
              copy_between(nb::cast<python_buffer&>(destination), self, stream, "copy_to");
              return nb::borrow(destination);
            }
            const host_view view(destination, true);
            detail::check_copy_sizes("copy_to (host object)", view.bytes(), self.memory.size(), 1);
            copy_unlocked(view.data(), host_end, self.memory.data(), end_of(self), self.memory.size(),
                          operation_stream(self, stream));
            return nb::borrow(destination);
          },
          "dst"_a.none() = nb::none(), nb::kw_only(), "stream"_a.none() = nb::none(),
          "Copies into `dst` (a Buffer, a writable host object such as a NumPy array or bytearray, or None for a "
          "new Buffer from the same resource) in stream order; returns `dst`.")
      .def(
          "copy_from",
          [](python_buffer& self, nb::handle source, nb::handle stream) {
            open_buffer(self, "copy_from");
            if (nb::isinstance<python_buffer>(source)) {
              copy_between(self, nb::cast<python_buffer&>(source), stream, "copy_from");
              return;
            }
            const host_view view(source, false);
            detail::check_copy_sizes("copy_from (host object)", self.memory.size(), view.bytes(), 1);
            copy_unlocked(self.memory.data(), end_of(self), view.data(), host_end, view.bytes(),
                          operation_stream(self, stream));
          },
          "src"_a, nb::kw_only(), "stream"_a.none() = nb::none(),
          "Copies `src` (a Buffer or a host object with the buffer protocol) in stream order.")
      .def(
          "fill",
          [](python_buffer& self, std::uint32_t value, std::size_t width, nb::handle stream) {
            open_buffer(self, "fill");
            if (width != 1 && width != 2 && width != 4)
              throw nb::value_error(("fill: width " + std::to_string(width) + " is none of 1, 2, 4").c_str());
            if (self.memory.size() % width != 0)
              throw nb::value_error(("fill: " + std::to_string(self.memory.size()) +
                                     " bytes are not a whole number of " + std::to_string(width) + "-byte values")
                                        .c_str());
            if (width < 4 && value >> (8 * width) != 0)
              throw nb::value_error(
                  ("fill: value " + std::to_string(value) + " does not fit " + std::to_string(width) + " bytes")
                      .c_str());
            const std::uint8_t byte = static_cast<std::uint8_t>(value);
            const std::uint16_t half = static_cast<std::uint16_t>(value);
            const void* pattern = width == 1 ? static_cast<const void*>(&byte)
                                  : width == 2 ? static_cast<const void*>(&half)
                                               : static_cast<const void*>(&value);
            const stream_ref on = operation_stream(self, stream);
            nb::gil_scoped_release unlocked;  // pageable memory is filled by the host
            detail::fill_pattern(self.memory.data(), self.memory.size() / width, pattern, width,
                                 self.memory.resource()->kind(), on);
          },
          "value"_a, "width"_a = 1, nb::kw_only(), "stream"_a.none() = nb::none(),
          "Sets every `width`-byte value (1, 2 or 4) to `value`, in stream order.")
      .def(
          "prefetch_to_device",
          [](python_buffer& self, int device, nb::handle stream) {
            open_buffer(self, "prefetch_to_device");
            detail::require_managed_kind(self.memory.resource()->kind(), "prefetch_to_device");
            detail::prefetch_managed(self.memory.data(), self.memory.size(), memory_location::device(device),
                                     operation_stream(self, stream), "prefetch_to_device");
          },
          "device_id"_a, nb::kw_only(), "stream"_a.none() = nb::none())
      .def(
          "prefetch_to_host",
          [](python_buffer& self, nb::handle stream) {
            open_buffer(self, "prefetch_to_host");
            detail::require_managed_kind(self.memory.resource()->kind(), "prefetch_to_host");
            detail::prefetch_managed(self.memory.data(), self.memory.size(), memory_location::host(),
                                     operation_stream(self, stream), "prefetch_to_host");
          },
          nb::kw_only(), "stream"_a.none() = nb::none())
      .def(
          "close",
          [](python_buffer& self, nb::handle stream) {
            if (!self.memory.is_open()) return;
            self.memory.close(operation_stream(self, stream));
          },
          "stream"_a.none() = nb::none(),
          "Frees the memory in stream order on `stream` (None: the buffer's own). Closing twice does nothing.")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def(
          "__exit__", [](python_buffer& self, nb::args) { self.memory.close(); })
      .def("__dlpack__", &to_capsule, nb::kw_only(), "stream"_a.none() = nb::none(),
           "max_version"_a.none() = nb::none(), "dl_device"_a.none() = nb::none(), "copy"_a.none() = nb::none(),
           "A DLPack capsule of the bytes (1-D uint8), ordered before the consumer's `stream`.")
      .def("__dlpack_device__",
           [](python_buffer& self) {
             const DLDevice device = device_of(open_buffer(self, "__dlpack_device__"));
             return std::make_tuple(static_cast<int>(device.device_type), device.device_id);
           })
      .def("__repr__", &buffer_repr);
}

}  // namespace cudapmr::python
