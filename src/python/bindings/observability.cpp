// SPDX-License-Identifier: Apache-2.0
// The history adaptor and the snapshot of a whole stack, as Python sees them:
// the same events, annotations and export formats as in C++.
#include "bindings.hpp"

#include <cudapmr/adaptors/failure_callback_adaptor.hpp>
#include <cudapmr/adaptors/history_adaptor.hpp>
#include <cudapmr/memory_snapshot.hpp>
#include <cudapmr/snapshot_export.hpp>

#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nb = nanobind;
using namespace nb::literals;

namespace cudapmr::python {
namespace {

nb::dict event_dict(const history_event& event) {
  nb::dict result;
  result["action"] = std::string(to_string(event.action));
  result["sequence"] = event.sequence;
  result["time_ns"] = event.time_ns;
  result["thread"] = event.thread;
  result["address"] = reinterpret_cast<std::uintptr_t>(event.pointer);
  result["bytes"] = event.bytes;
  result["alignment"] = event.alignment;
  result["stream"] = stream_int(event.stream);
  result["call_stack"] = return_addresses(event.call_stack);
  result["device_free_bytes"] =
      event.device_free_bytes ? nb::object(nb::int_(*event.device_free_bytes)) : nb::none();
  return result;
}

nb::dict annotation_dict(const history_annotation& annotation) {
  nb::dict result;
  result["name"] = text_of(annotation.name);  // an ill-formed name (a lone surrogate) reads as U+FFFD
  result["stage"] = std::string(to_string(annotation.stage));
  result["time_ns"] = annotation.time_ns;
  result["thread"] = annotation.thread;
  return result;
}

/// The stacks under `tops` in one of the three formats, as bytes.
/// \throws nanobind::value_error naming the format when it is none of them.
nb::bytes export_snapshot(const std::vector<const stream_ordered_resource*>& tops, std::string_view format) {
  if (format != "json" && format != "pickle" && format != "chrome")
    throw nb::value_error(("snapshot format \"" + std::string(format) +
                           "\" is none of \"json\", \"pickle\" (PyTorch's) or \"chrome\" (Perfetto's)")
                              .c_str());
  std::string exported;
  {
    nb::gil_scoped_release unlocked;  // the resources' locks, and a symbolizer with call stacks
    std::vector<memory_snapshot> taken;
    taken.reserve(tops.size());
    for (const stream_ordered_resource* top : tops) taken.push_back(snapshot(*top));
    exported = format == "json"     ? to_json(taken)
               : format == "pickle" ? to_pytorch_pickle(taken)
                                    : to_chrome_trace(taken);
  }
  return nb::bytes(exported.data(), exported.size());
}

/// Whether the interpreter is going away: a thread that takes the GIL then
/// is ended by Python (or, from 3.15, refused), so the callback is not called.
bool python_is_finalizing() noexcept {
#if PY_VERSION_HEX >= 0x030D0000
  return !Py_IsInitialized() || Py_IsFinalizing();
#else
  return !Py_IsInitialized() || _Py_IsFinalizing();
#endif
}

/// False where nanobind's guard could not take the GIL (newer Pythons, at exit).
template <class Guard>
bool holds_the_gil(const Guard& guard) noexcept {
  if constexpr (requires { guard.is_valid(); })
    return guard.is_valid();
  else
    return true;
}

/// A Python callable as the adaptor's callback: called with the GIL (the
/// allocation released it) and a dict of the refusal; its truth asks for a
/// retry. At interpreter exit the refusal goes through without it.
failure_callback python_failure_callback(nb::callable callback) {
  return [callback = std::move(callback)](const allocation_failure& failure) {
    if (python_is_finalizing()) return false;
    nb::gil_scoped_acquire locked;
    if (!holds_the_gil(locked)) return false;
    nb::dict told;
    told["bytes"] = failure.bytes;
    told["alignment"] = failure.alignment;
    told["stream"] = stream_int(failure.stream);
    told["attempt"] = failure.attempt;
    told["error"] = text_of(failure.error.what());
    const out_of_memory_report* report = failure.error.report();
    told["report"] = report ? text_of(report->text) : nb::none();
    return nb::cast<bool>(nb::bool_(callback(told)));
  };
}

}  // namespace

void bind_observability(nb::module_& module) {
  nb::class_<failure_callback_adaptor, resource_adaptor>(
      module, "FailureCallbackAdaptor",
      "A second chance when the upstream runs out: calls `callback` and tries again while it returns true.")
      .def(
          "__init__",
          [](failure_callback_adaptor* self, stream_ordered_resource& upstream, nb::callable callback) {
            new (self) failure_callback_adaptor(upstream, python_failure_callback(std::move(callback)));
          },
          "upstream"_a, "callback"_a, nb::keep_alive<1, 2>(),
          "callback(failure) gets a dict (bytes, alignment, stream, attempt: 1 for the first refusal of the "
          "request, and counting; error: the upstream's message; report: a HistoryAdaptor's report below, else "
          "None) and may free memory (gc.collect(), another framework's empty_cache, trim()) before returning "
          "true for a retry; false lets OutOfMemoryError through, and what it raises reaches the caller. It runs "
          "on the allocating thread with the GIL taken, must not allocate from this adaptor, and should hold the "
          "resources above it by weakref (a cycle through it is not collected).");

  nb::class_<history_adaptor, resource_adaptor>(
      module, "HistoryAdaptor",
      "Keeps the latest allocation events (allocate, free, free_completed, out_of_memory) in a bounded ring, and "
      "named regions; an OutOfMemoryError through it carries a report of the stack below.")
      .def(
          "__init__",
          [](history_adaptor* self, stream_ordered_resource& upstream, const count& capacity,
             bool capture_call_stacks, const count& call_stack_depth) {
            history_options options;
            options.capacity = capacity.get("HistoryAdaptor: capacity");
            options.capture_call_stacks = capture_call_stacks;
            options.call_stack_depth = call_stack_depth.get("HistoryAdaptor: call_stack_depth");
            new (self) history_adaptor(upstream, options);
          },
          "upstream"_a, nb::kw_only(), "capacity"_a = history_options{}.capacity,
          "capture_call_stacks"_a = false, "call_stack_depth"_a = history_options{}.call_stack_depth,
          nb::keep_alive<1, 2>(),
          "capacity: how many of the latest events are kept (rounded up to a power of two); call stacks cost "
          "some microseconds an allocation.")
      .def(
          "events",
          [](const history_adaptor& self) { return dicts_of(self.events(), event_dict); },
          "The events kept, oldest first, each a dict with the names of a snapshot's events: action, sequence, "
          "time_ns (steady clock), thread (cudapmr's number of the thread, from 1), address, bytes, alignment, "
          "stream, call_stack (return addresses, innermost first; the first are the module's own) and "
          "device_free_bytes (out_of_memory events of device memory; else None).")
      .def_prop_ro("recorded", &history_adaptor::recorded, "Every event ever recorded, kept or not.")
      .def_prop_ro("dropped", &history_adaptor::dropped, "Events the ring no longer holds.")
      .def_prop_ro("capacity", &history_adaptor::capacity, "The ring's size in events.")
      .def(
          "annotate_begin", [](history_adaptor& self, const nb::str& name) { self.annotate_begin(utf8_of(name)); },
          "name"_a, "Marks the start of the region `name` (see annotate()).")
      .def(
          "annotate_end", [](history_adaptor& self, const nb::str& name) { self.annotate_end(utf8_of(name)); },
          "name"_a, "Marks the end of the region `name`.")
      .def(
          "annotations",
          [](const history_adaptor& self) { return dicts_of(self.annotations(), annotation_dict); },
          "The region marks kept, oldest first, each a dict: name, stage (\"begin\" or \"end\"), time_ns, thread.");

  module.def("_export_snapshot", &export_snapshot, "resources"_a, "format"_a,
             "The stack from each resource down, taken now, as bytes: \"json\" (cudapmr's format), \"pickle\" "
             "(PyTorch's memory snapshot) or \"chrome\" (Perfetto's trace).");
}

}  // namespace cudapmr::python
