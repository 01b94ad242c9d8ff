// SPDX-License-Identifier: Apache-2.0
// The module cudapmr._cudapmr: cudapmr's resources, buffers and errors for Python.
#include "bindings.hpp"

#include <cudapmr/adaptors/tracking_adaptor.hpp>
#include <cudapmr/error.hpp>
#include <cudapmr/memory_snapshot.hpp>
#include <cudapmr/version.hpp>

#include <cstddef>
#include <string>

namespace nb = nanobind;

namespace cudapmr::python {

nb::object text_of(std::string_view text) {
  PyObject* decoded = PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace");
  if (decoded == nullptr) {  // no memory for it: the caller goes on without the text
    PyErr_Clear();
    return nb::none();
  }
  return nb::steal(decoded);
}

std::string utf8_of(const nb::str& text) {
  const nb::object encoded = nb::steal(PyUnicode_AsEncodedString(text.ptr(), "utf-8", "surrogatepass"));
  if (!encoded.is_valid()) throw nb::python_error();
  return {PyBytes_AS_STRING(encoded.ptr()), static_cast<std::size_t>(PyBytes_GET_SIZE(encoded.ptr()))};
}

std::size_t count::get(const char* what) const {
  const nb::object index = nb::steal(PyNumber_Index(value.ptr()));
  if (!index.is_valid()) throw nb::python_error();
  const unsigned long long converted = PyLong_AsUnsignedLongLong(index.ptr());
  if (!PyErr_Occurred()) return static_cast<std::size_t>(converted);
  PyErr_Clear();  // negative (OverflowError) or past 64 bits: said in a ValueError of its own
  const bool negative = PyObject_RichCompareBool(index.ptr(), nb::int_(0).ptr(), Py_LT) == 1;
  PyErr_Clear();
  throw nb::value_error((std::string(what) + " " + nb::str(index).c_str() +
                         (negative ? " is negative" : " is past 2**64 - 1"))
                            .c_str());
}

namespace {

/// Python's exceptions for cudapmr's: each keeps the C++ message, which names
/// the bytes, the resource and CUDA's answer.
void bind_errors(nb::module_& module) {
  static nb::object out_of_memory_error = nb::borrow(nb::exception<cudapmr::out_of_memory>(
      module, "OutOfMemoryError", PyExc_MemoryError));
  static nb::object cuda_error_type = nb::borrow(nb::exception<cudapmr::cuda_error>(
      module, "CudaError", PyExc_RuntimeError));
  static nb::object misuse_error_type = nb::borrow(nb::exception<cudapmr::misuse_error>(
      module, "MisuseError", PyExc_ValueError));
  // Each message decoded leniently; CudaError with CUDA's error number, for
  // callers that branch on it, OutOfMemoryError with the bytes asked and the report.
  nb::register_exception_translator([](const std::exception_ptr& error, void*) {
    try {
      std::rethrow_exception(error);
    } catch (const cudapmr::cuda_error& failure) {
      nb::object instance = cuda_error_type(text_of(failure.what()));
      nb::setattr(instance, "error_code", nb::int_(static_cast<int>(failure.error())));
      PyErr_SetObject(cuda_error_type.ptr(), instance.ptr());
    } catch (const cudapmr::out_of_memory& failure) {
      nb::object instance = out_of_memory_error(text_of(failure.what()));
      nb::setattr(instance, "requested_bytes", nb::int_(failure.requested_bytes()));
      // The text of the stack's state at the refusal, where a history adaptor explained it.
      const out_of_memory_report* report = failure.report();
      nb::setattr(instance, "report", report ? text_of(report->text) : nb::none());
      PyErr_SetObject(out_of_memory_error.ptr(), instance.ptr());
    } catch (const cudapmr::misuse_error& failure) {  // its text may hold call stacks, too
      PyErr_SetObject(misuse_error_type.ptr(), text_of(failure.what()).ptr());
    }
  });
}

}  // namespace
}  // namespace cudapmr::python

NB_MODULE(_cudapmr, module) {
  module.doc() = "cudapmr's memory resources, adaptors and buffers (the native part of the cudapmr package).";
  module.attr("__version__") = CUDAPMR_VERSION_STRING;
  // Buffers and resources that Python still holds at exit are not leaks of the bindings.
  nb::set_leak_warnings(false);
  cudapmr::python::bind_errors(module);
  cudapmr::python::bind_streams(module);
  cudapmr::python::bind_resources(module);
  cudapmr::python::bind_buffer(module);
  cudapmr::python::bind_observability(module);
  cudapmr::python::bind_torch_allocator(module);
}
