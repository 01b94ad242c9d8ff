// SPDX-License-Identifier: Apache-2.0
// Stream arguments from Python, and an owning stream for Python code.
#include "bindings.hpp"

#include <cudapmr/device.hpp>
#include <cudapmr/error.hpp>
#include <cudapmr/host_topology.hpp>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>

namespace nb = nanobind;

namespace cudapmr::python {
namespace {

/// An int as a handle. \throws nanobind::value_error for a negative one.
cudaStream_t handle_from_int(nb::handle value) {
  int overflow = 0;
  const long long signed_value = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  if (overflow == 0 && signed_value < 0)
    throw nb::value_error(("stream handle " + std::to_string(signed_value) + " is negative").c_str());
  const unsigned long long handle = PyLong_AsUnsignedLongLong(value.ptr());
  if (PyErr_Occurred()) throw nb::python_error();
  return reinterpret_cast<cudaStream_t>(static_cast<std::uintptr_t>(handle));
}

/// The handle of an object that is no int: the stream protocol or a library's attribute.
cudaStream_t handle_from_object(nb::handle stream) {
  if (nb::hasattr(stream, "__cuda_stream__")) {
    nb::object protocol = stream.attr("__cuda_stream__");
    if (PyCallable_Check(protocol.ptr())) protocol = protocol();
    // The CUDA stream protocol's version 0: a tuple (0, handle).
    if (!nb::isinstance<nb::tuple>(protocol) || nb::len(protocol) != 2 || !PyLong_Check(protocol[0].ptr()) ||
        PyBool_Check(protocol[0].ptr()) || !protocol[0].equal(nb::int_(0)))
      throw nb::value_error(("__cuda_stream__ of an object of type " + std::string(nb::type_name(stream.type()).c_str()) +
                             " gave " + std::string(nb::repr(protocol).c_str()) +
                             "; the CUDA stream protocol's version 0 gives a tuple (0, handle)")
                                .c_str());
    return handle_from_int(nb::int_(protocol[1]));
  }
  for (const char* attribute : {"cuda_stream", "ptr", "handle"})
    if (nb::hasattr(stream, attribute)) return handle_from_int(nb::int_(stream.attr(attribute)));
  if (PyIndex_Check(stream.ptr())) {  // an integer of another type, such as NumPy's
    const nb::object value = nb::steal(PyNumber_Index(stream.ptr()));
    if (!value.is_valid()) throw nb::python_error();
    return handle_from_int(value);
  }
  throw nb::type_error(("a stream must be None, an int handle, an object with __cuda_stream__, or a CuPy or "
                        "PyTorch stream; got an object of type " +
                        std::string(nb::type_name(stream.type()).c_str()))
                           .c_str());
}

}  // namespace

cudaStream_t stream_handle(nb::handle stream) {
  if (stream.is_none()) return nullptr;
  if (PyLong_CheckExact(stream.ptr())) return handle_from_int(stream);
  return handle_from_object(stream);
}

void bind_streams(nb::module_& module) {
  module.def(
      "stream_handle", [](nb::handle stream) { return reinterpret_cast<std::uintptr_t>(stream_handle(stream)); },
      nb::arg("stream").none(), "The CUDA stream handle (an int) that a stream argument names.");

  nb::class_<cudapmr::stream>(module, "Stream",
                              "An owning, non-blocking CUDA stream of one device; waits for its work when closed.")
      .def(nb::init<int>(), nb::arg("device_id") = 0)
      .def_prop_ro("handle", [](const cudapmr::stream& self) { return stream_int(self.ref()); })
      .def_prop_ro("device_id", &cudapmr::stream::device)
      .def("__cuda_stream__", [](const cudapmr::stream& self) { return std::make_tuple(0, stream_int(self.ref())); })
      .def("synchronize", &cudapmr::stream::synchronize, nb::call_guard<nb::gil_scoped_release>())
      .def("__int__", [](const cudapmr::stream& self) { return stream_int(self.ref()); })
      .def("__repr__", [](const cudapmr::stream& self) {
        return "<cudapmr.Stream " + std::to_string(stream_int(self.ref())) + " of device " +
               std::to_string(self.device()) + ">";
      });

  module.def("device_count", &cudapmr::device::count, "The number of CUDA devices; 0 where there is none.");
  module.def(
      "current_device", [] { return cudapmr::device::current().ordinal(); },
      "The calling thread's current CUDA device (without initializing CuPy or PyTorch).");
  module.def(
      "device_name", [](int device) { return cudapmr::device(device).name(); }, nb::arg("device_id") = 0);
  module.def(
      "compute_capability",
      [](int device) {
        const auto capability = cudapmr::device(device).compute_capability();
        return std::make_tuple(capability.major, capability.minor);
      },
      nb::arg("device_id") = 0, "(major, minor) of the device.");
  module.def(
      "device_memory_info",
      [](int device) {
        const cudapmr::device chosen(device);
        return std::make_tuple(chosen.free_memory(), chosen.total_memory());
      },
      nb::arg("device_id") = 0, "(free, total) global memory of the device, in bytes.");
  module.def(
      "device_attribute",
      [](int device, int attribute) { return cudapmr::device(device).attribute(static_cast<cudaDeviceAttr>(attribute)); },
      nb::arg("device_id"), nb::arg("attribute"), "A cudaDeviceAttr of the device, by its number.");
  module.def(
      "synchronize_device", [](int device) {
        cudapmr::detail::scoped_device on(cudapmr::device(device).ordinal());  // a bad ordinal named first
        CUDAPMR_CHECK(cudaDeviceSynchronize());
      },
      nb::arg("device_id") = 0, nb::call_guard<nb::gil_scoped_release>(), "Waits for all work on the device.");

  module.attr("ANY_NUMA_NODE") = cudapmr::any_numa_node;
  module.def("host_numa_nodes", &cudapmr::host_numa_nodes,
             "The host's NUMA nodes by the system's numbers; [0] on a machine without NUMA.");
  module.def("nearest_numa_node", &cudapmr::nearest_numa_node, nb::arg("device_id") = 0,
             "The host NUMA node nearest the device (the driver's answer, else hwloc's); None where unknown.");
  module.def(
      "numa_node_of", [](std::uintptr_t address) { return cudapmr::numa_node_of(reinterpret_cast<const void*>(address)); },
      nb::arg("address"), "The NUMA node whose memory holds the page at an address, as the kernel reports it; None "
                          "for a page not backed yet.");
}

}  // namespace cudapmr::python
