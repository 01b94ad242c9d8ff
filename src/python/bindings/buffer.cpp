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
#include <functional>
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

/// What a capsule's tensor points to: a share of the memory, so that it
/// stays while the consumer holds it (after the Buffer is closed too), and the shape.
struct dlpack_owner {
  std::shared_ptr<shared_memory> memory;
  std::int64_t shape;
  DLManagedTensor legacy{};
  DLManagedTensorVersioned versioned{};

  /// Drops the share, freeing the memory if it was the last; any thread, with or without the GIL.
  static void release(dlpack_owner* owner) noexcept { delete owner; }
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

/// The memory of an open Buffer.
/// \throws std::invalid_argument naming `operation` once the Buffer is closed.
cudapmr::buffer<std::byte>& open_memory(python_buffer& self, const char* operation) {
  if (!self.shared) detail::throw_closed_buffer(operation);
  return self.shared->memory;
}

/// A share of an open Buffer's memory for a call that uses it without the
/// GIL: a close() from another thread meanwhile leaves the free to the share.
/// \throws std::invalid_argument naming `operation` once the Buffer is closed.
std::shared_ptr<shared_memory> pin(python_buffer& self, const char* operation) {
  if (!self.shared) detail::throw_closed_buffer(operation);
  return self.shared;
}

/// The DLPack device of the buffer's memory.
DLDevice device_of(const cudapmr::buffer<std::byte>& memory) {
  const stream_ordered_resource& resource = *memory.resource();
  return dlpack_device(resource.kind(), resource.device_id());
}

/// Orders the consumer's `stream` (DLPack's convention: None the legacy
/// default stream, 1 legacy, 2 per-thread, -1 no ordering; a stream of the
/// buffer's device) after the work queued on the buffer's stream.
/// Host-accessible memory with no stream named is read by the host, so the
/// buffer's stream is waited for.
void order_for_consumer(python_buffer& self, nb::handle stream) {
  const stream_ordered_resource& resource = *self.shared->memory.resource();
  if (resource.kind() == memory_kind::pageable) {
    // Pageable memory needs no ordering, but an argument that names no stream is still the caller's mistake.
    if (!stream.is_none() && !PyLong_Check(stream.ptr())) static_cast<void>(stream_handle(stream));
    return;
  }
  // The device of the buffer's stream current: the default streams are its
  // own, and the event can be recorded on the buffer's stream (consumers such
  // as PyTorch pass that device's stream with another device current).
  std::optional<cudapmr::detail::scoped_device> on_device;
  int stream_device = -1;
  if (cudaStreamGetDevice(self.stream.get(), &stream_device) == cudaSuccess) on_device.emplace(stream_device);
  else static_cast<void>(cudaGetLastError());  // a stream CUDA cannot place: ordered as before, on the current device
  cudaStream_t consumer = nullptr;
  if (stream.is_none()) {
    if (resource.is_host_accessible()) {
      nb::gil_scoped_release unlocked;
      CUDAPMR_CHECK(cudaStreamSynchronize(self.stream.get()));
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
  const cudaStream_t producer = self.stream.get();
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
nb::object to_capsule(python_buffer& self, nb::handle stream, std::optional<std::pair<int, int>> max_version,
                      std::optional<std::pair<int, int>> dl_device, std::optional<bool> copy) {
  // Pinned: a consumer's stream is waited for without the GIL.
  const std::shared_ptr<shared_memory> pinned = pin(self, "__dlpack__");
  cudapmr::buffer<std::byte>& memory = pinned->memory;
  if (copy && *copy)
    throw nb::buffer_error("cudapmr.Buffer.__dlpack__: copy=True is not supported; the memory is shared");
  DLDevice device = device_of(memory);
  if (dl_device && (dl_device->first != device.device_type || dl_device->second != device.device_id)) {
    const bool host_wanted = dl_device->first == kDLCPU;
    if (!(host_wanted && memory.resource()->is_host_accessible()))
      throw nb::buffer_error(("cudapmr.Buffer.__dlpack__: the memory is on DLPack device (" +
                              std::to_string(device.device_type) + ", " + std::to_string(device.device_id) +
                              "), not (" + std::to_string(dl_device->first) + ", " +
                              std::to_string(dl_device->second) + "), and is not copied")
                                 .c_str());
    device = DLDevice{kDLCPU, 0};
  }
  order_for_consumer(self, stream);

  auto* owner = new dlpack_owner{pinned, detail::dlpack_extent(memory.size())};
  DLTensor tensor{};
  tensor.data = memory.data();
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

detail::copy_end end_of(const cudapmr::buffer<std::byte>& memory) {
  return {memory.resource()->kind(), memory.resource()->device_id()};
}

/// The stream an operation runs on: the one named, else the buffer's own.
stream_ref operation_stream(const python_buffer& self, nb::handle stream) {
  return stream.is_none() ? self.stream : stream_ref(stream_handle(stream));
}

/// Copies `bytes` in stream order without the GIL: a copy to or from pageable
/// memory waits for the stream. The caller pins both ends.
void copy_unlocked(void* destination, detail::copy_end destination_end, const void* source,
                   detail::copy_end source_end, std::size_t bytes, stream_ref stream) {
  nb::gil_scoped_release unlocked;
  detail::copy_bytes(destination, destination_end, source, source_end, bytes, stream);
}

void copy_between(python_buffer& destination, python_buffer& source, nb::handle stream, const char* operation) {
  const std::shared_ptr<shared_memory> to = pin(destination, operation);
  const std::shared_ptr<shared_memory> from = pin(source, operation);
  detail::check_copy_sizes(operation, to->memory.size(), from->memory.size(), 1);
  copy_unlocked(to->memory.data(), end_of(to->memory), from->memory.data(), end_of(from->memory),
                from->memory.size(), operation_stream(source, stream));
}

std::string buffer_repr(const python_buffer& self) {
  if (!self.shared) return "<cudapmr.Buffer closed>";
  const cudapmr::buffer<std::byte>& memory = self.shared->memory;
  return "<cudapmr.Buffer " + std::to_string(memory.size()) + " bytes at " +
         std::to_string(reinterpret_cast<std::uintptr_t>(memory.data())) + " from " +
         memory.resource()->description() + ">";
}

/// Releases the GIL for its lifetime where this thread holds it: the last
/// share of a Buffer's memory may be dropped with or without it.
class gil_released_if_held {
 public:
  gil_released_if_held() noexcept
      : state_(Py_IsInitialized() && PyGILState_Check() != 0 ? PyEval_SaveThread() : nullptr) {}
  ~gil_released_if_held() {
    if (state_ != nullptr) PyEval_RestoreThread(state_);
  }
  gil_released_if_held(const gil_released_if_held&) = delete;
  gil_released_if_held& operator=(const gil_released_if_held&) = delete;

 private:
  PyThreadState* state_;
};

/// A property of the open Buffer's memory, as `read` sees it; closed: `closed_value`.
template <class Read>
auto memory_property(Read read, decltype(read(std::declval<const cudapmr::buffer<std::byte>&>())) closed_value) {
  return [read, closed_value](const python_buffer& self) { return self.shared ? read(self.shared->memory) : closed_value; };
}

/// A property of the open Buffer's resource, as `read` sees it; closed: refused, naming `name`.
template <class Read>
auto resource_property(Read read, const char* name) {
  return [read, name](python_buffer& self) { return std::invoke(read, *open_memory(self, name).resource()); };
}

}  // namespace

shared_memory::~shared_memory() {
  {
    // A free may wait for the device, and a host callback queued before it may need the GIL.
    const gil_released_if_held unlocked;
    memory.close();
  }
  if (Py_IsInitialized()) {  // at shutdown the reference is left: the resource may be gone with the interpreter
    const PyGILState_STATE state = PyGILState_Ensure();
    Py_DECREF(resource_object_);
    PyGILState_Release(state);
  }
}

void python_buffer::close(stream_ref on) noexcept {
  if (!shared) return;
  shared->memory.set_stream(on);
  // Deferral, not refusal, under a live DLPack export: a `with` block around
  // from_dlpack is how CuPy and PyTorch code reads, and the consumer's array must stay valid.
  shared.reset();
}

python_buffer* allocate_buffer(nb::handle owner, stream_ordered_resource& resource, std::size_t bytes,
                               nb::handle stream) {
  const stream_ref on = stream_handle(stream);
  std::optional<cudapmr::buffer<std::byte>> memory;
  {
    nb::gil_scoped_release unlocked;  // an allocation may wait for the device (a trim, a synchronous upstream)
    memory.emplace(resource, bytes, on);
  }
  return new python_buffer(std::make_shared<shared_memory>(owner, std::move(*memory)), on);
}

void bind_buffer(nb::module_& module) {
  const auto address = [](const cudapmr::buffer<std::byte>& memory) {
    return reinterpret_cast<std::uintptr_t>(memory.data());
  };
  const auto bytes = [](const cudapmr::buffer<std::byte>& memory) { return memory.size(); };
  nb::class_<python_buffer>(module, "Buffer", nb::is_weak_referenceable(),
                            "Bytes from a memory resource, freed in stream order when closed (or collected) and no "
                            "DLPack consumer still holds them.")
      .def_prop_ro("handle", memory_property(address, 0), "The address of the memory (an int); 0 once closed.")
      .def_prop_ro("ptr", memory_property(address, 0))
      .def_prop_ro("size", memory_property(bytes, 0), "Bytes; 0 once closed.")
      .def("__len__", memory_property(bytes, 0))
      .def_prop_ro("stream", [](const python_buffer& self) { return stream_int(self.stream); },
                   "The stream it was allocated on and is freed on by default (an int handle).")
      .def(
          "set_stream", [](python_buffer& self, nb::handle stream) { self.stream = stream_handle(stream); },
          "stream"_a.none())
      .def_prop_ro("is_open", [](const python_buffer& self) { return self.shared != nullptr; })
      .def_prop_ro("memory_resource",
                   [](const python_buffer& self) {
                     return self.shared ? nb::borrow(self.shared->resource_object()) : nb::none();
                   })
      .def_prop_ro("kind", resource_property([](const stream_ordered_resource& resource) {
                     return std::string(to_string(resource.kind()));
                   }, "kind"))
      .def_prop_ro("device_id", resource_property(&stream_ordered_resource::device_id, "device_id"))
      .def_prop_ro("is_device_accessible",
                   resource_property(&stream_ordered_resource::is_device_accessible, "is_device_accessible"))
      .def_prop_ro("is_host_accessible",
                   resource_property(&stream_ordered_resource::is_host_accessible, "is_host_accessible"))
      .def(
          "copy_to",
          [](python_buffer& self, nb::handle destination, nb::handle stream) -> nb::object {
            const std::shared_ptr<shared_memory> pinned = pin(self, "copy_to");
            cudapmr::buffer<std::byte>& memory = pinned->memory;
            if (destination.is_none()) {
              nb::object fresh = nb::cast(allocate_buffer(self.shared->resource_object(), *memory.resource(),
                                                          memory.size(),
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
            detail::check_copy_sizes("copy_to (host object)", view.bytes(), memory.size(), 1);
            copy_unlocked(view.data(), host_end, memory.data(), end_of(memory), memory.size(),
                          operation_stream(self, stream));
            return nb::borrow(destination);
          },
          "dst"_a.none() = nb::none(), nb::kw_only(), "stream"_a.none() = nb::none(),
          "Copies into `dst` (a Buffer, a writable host object such as a NumPy array or bytearray, or None for a "
          "new Buffer from the same resource) in stream order; returns `dst`.")
      .def(
          "copy_from",
          [](python_buffer& self, nb::handle source, nb::handle stream) {
            const std::shared_ptr<shared_memory> pinned = pin(self, "copy_from");
            cudapmr::buffer<std::byte>& memory = pinned->memory;
            if (nb::isinstance<python_buffer>(source)) {
              copy_between(self, nb::cast<python_buffer&>(source), stream, "copy_from");
              return;
            }
            const host_view view(source, false);
            detail::check_copy_sizes("copy_from (host object)", memory.size(), view.bytes(), 1);
            copy_unlocked(memory.data(), end_of(memory), view.data(), host_end, view.bytes(),
                          operation_stream(self, stream));
          },
          "src"_a, nb::kw_only(), "stream"_a.none() = nb::none(),
          "Copies `src` (a Buffer or a host object with the buffer protocol) in stream order.")
      .def(
          "fill",
          [](python_buffer& self, const count& given, const count& given_width, nb::handle stream) {
            const std::size_t width = given_width.get("fill: width");
            const std::size_t wide_value = given.get("fill: value");
            const std::shared_ptr<shared_memory> pinned = pin(self, "fill");
            cudapmr::buffer<std::byte>& memory = pinned->memory;
            if (width != 1 && width != 2 && width != 4)
              throw nb::value_error(("fill: width " + std::to_string(width) + " is none of 1, 2, 4").c_str());
            if (memory.size() % width != 0)
              throw nb::value_error(("fill: " + std::to_string(memory.size()) +
                                     " bytes are not a whole number of " + std::to_string(width) + "-byte values")
                                        .c_str());
            if (wide_value >> (8 * width) != 0)
              throw nb::value_error(
                  ("fill: value " + std::to_string(wide_value) + " does not fit " + std::to_string(width) + " bytes")
                      .c_str());
            const auto value = static_cast<std::uint32_t>(wide_value);
            const std::uint8_t byte = static_cast<std::uint8_t>(value);
            const std::uint16_t half = static_cast<std::uint16_t>(value);
            const void* pattern = width == 1 ? static_cast<const void*>(&byte)
                                  : width == 2 ? static_cast<const void*>(&half)
                                               : static_cast<const void*>(&value);
            const stream_ref on = operation_stream(self, stream);
            nb::gil_scoped_release unlocked;  // pageable memory is filled by the host
            detail::fill_pattern(memory.data(), memory.size() / width, pattern, width, memory.resource()->kind(), on);
          },
          "value"_a, "width"_a = 1, nb::kw_only(), "stream"_a.none() = nb::none(),
          "Sets every `width`-byte value (1, 2 or 4) to `value`, in stream order.")
      .def(
          "prefetch_to_device",
          [](python_buffer& self, int device, nb::handle stream) {
            cudapmr::buffer<std::byte>& memory = open_memory(self, "prefetch_to_device");
            detail::require_managed_kind(memory.resource()->kind(), "prefetch_to_device");
            detail::prefetch_managed(memory.data(), memory.size(), memory_location::device(device),
                                     operation_stream(self, stream), "prefetch_to_device");
          },
          "device_id"_a, nb::kw_only(), "stream"_a.none() = nb::none())
      .def(
          "prefetch_to_host",
          [](python_buffer& self, nb::handle stream) {
            cudapmr::buffer<std::byte>& memory = open_memory(self, "prefetch_to_host");
            detail::require_managed_kind(memory.resource()->kind(), "prefetch_to_host");
            detail::prefetch_managed(memory.data(), memory.size(), memory_location::host(),
                                     operation_stream(self, stream), "prefetch_to_host");
          },
          nb::kw_only(), "stream"_a.none() = nb::none())
      .def(
          "close", [](python_buffer& self, nb::handle stream) { self.close(operation_stream(self, stream)); },
          "stream"_a.none() = nb::none(),
          "Frees the memory in stream order on `stream` (None: the buffer's own). Closing twice does nothing. "
          "While a DLPack consumer (a NumPy, CuPy or PyTorch array) still holds the memory, the Buffer closes "
          "at once and the free waits for the last consumer to let go; it is then made on this `stream`, so "
          "order the consumer's work before it.")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def(
          "__exit__", [](python_buffer& self, nb::args) { self.close(self.stream); },
          "Closes on the buffer's stream: freed now, or once the last DLPack consumer lets go.")
      .def("__dlpack__", &to_capsule, nb::kw_only(), "stream"_a.none() = nb::none(),
           "max_version"_a.none() = nb::none(), "dl_device"_a.none() = nb::none(), "copy"_a.none() = nb::none(),
           "A DLPack capsule of the bytes (1-D uint8), ordered before the consumer's `stream`; the consumer "
           "owns a share of the memory, which outlives close() until it lets go.")
      .def("__dlpack_device__",
           [](python_buffer& self) {
             const DLDevice device = device_of(open_memory(self, "__dlpack_device__"));
             return std::make_tuple(static_cast<int>(device.device_type), device.device_id);
           })
      .def("__repr__", &buffer_repr);
}

}  // namespace cudapmr::python
