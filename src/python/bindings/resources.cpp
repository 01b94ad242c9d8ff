// SPDX-License-Identifier: Apache-2.0
// The memory resources, their options and their statistics, as Python classes.
#include "bindings.hpp"

#include <cudapmr/adaptors/caching_resource.hpp>
#include <cudapmr/adaptors/coalescing_resource.hpp>
#include <cudapmr/adaptors/limiting_adaptor.hpp>
#include <cudapmr/adaptors/logging_adaptor.hpp>
#include <cudapmr/adaptors/statistics_adaptor.hpp>
#include <cudapmr/adaptors/tracking_adaptor.hpp>
#include <cudapmr/current_resource.hpp>
#include <cudapmr/device_malloc_resource.hpp>
#include <cudapmr/device_stack.hpp>
#include <cudapmr/device_memory_resource.hpp>
#include <cudapmr/host_memory_resource.hpp>
#include <cudapmr/virtual_memory_resource.hpp>
#include <cudapmr/managed_memory_resource.hpp>
#include <cudapmr/pinned_memory_resource.hpp>
#include <cudapmr/pool_resource.hpp>

#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace nb = nanobind;
using namespace nb::literals;

namespace cudapmr::python {
namespace {

std::string counter_repr(const usage_counter& counter) {
  return "current=" + std::to_string(counter.current) + ", peak=" + std::to_string(counter.peak) +
         ", total=" + std::to_string(counter.total);
}

/// The byte counts of a pool's options class: each a property set from any
/// int, with `count`'s ValueError naming "Class.field" (def_rw of a
/// std::size_t gives nanobind's TypeError), and the start of the class's repr.
template <class Options>
struct count_fields {
  std::string class_name;
  std::vector<std::pair<const char*, std::size_t Options::*>> fields;

  void bind(nb::class_<Options>& bound) const {
    for (const auto& [name, field] : fields)
      bound.def_prop_rw(
          name, [field = field](const Options& options) { return options.*field; },
          [field = field, what = class_name + "." + name](Options& options, const count& value) {
            options.*field = value.get(what.c_str());
          });
  }

  /// "Class(field=value, ..." for the repr to go on with the other fields.
  [[nodiscard]] std::string repr_start(const Options& options) const {
    std::string text = class_name + "(";
    for (const auto& [name, field] : fields) text += std::string(name) + "=" + std::to_string(options.*field) + ", ";
    return text;
  }
};

std::string optional_repr(const std::optional<std::size_t>& value) {
  return value ? std::to_string(*value) : std::string("None");
}

std::string optional_int_repr(const std::optional<int>& value) {
  return value ? std::to_string(*value) : std::string("None");
}

/// Constructs a pool kind over the default pool, or over an owned pool when options are given.
template <class Resource, class Options>
void construct_kind(Resource* self, const std::optional<Options>& options) {
  if (options)
    new (self) Resource(*options);
  else
    new (self) Resource();
}

void bind_statistics(nb::module_& module) {
  nb::class_<pool_stats>(module, "PoolStatistics", "A snapshot of a CUDA pool's counters, in bytes.")
      .def_ro("reserved_current", &pool_stats::reserved_current)
      .def_ro("reserved_high", &pool_stats::reserved_high)
      .def_ro("used_current", &pool_stats::used_current)
      .def_ro("used_high", &pool_stats::used_high)
      .def("__repr__", [](const pool_stats& stats) {
        return "PoolStatistics(reserved_current=" + std::to_string(stats.reserved_current) +
               ", reserved_high=" + std::to_string(stats.reserved_high) +
               ", used_current=" + std::to_string(stats.used_current) +
               ", used_high=" + std::to_string(stats.used_high) + ")";
      });

  nb::class_<usage_counter>(module, "UsageCounter", "One quantity: current, peak and total.")
      .def_ro("current", &usage_counter::current)
      .def_ro("peak", &usage_counter::peak)
      .def_ro("total", &usage_counter::total)
      .def("__eq__", [](const usage_counter& a, const usage_counter& b) { return a == b; })
      .def("__repr__", [](const usage_counter& counter) { return "UsageCounter(" + counter_repr(counter) + ")"; });

  nb::class_<resource_statistics>(module, "ResourceStatistics",
                                  "Bytes (as requested) and allocations through a StatisticsAdaptor.")
      .def_ro("bytes", &resource_statistics::bytes)
      .def_ro("allocations", &resource_statistics::allocations)
      .def("__eq__", [](const resource_statistics& a, const resource_statistics& b) { return a == b; })
      .def("__repr__", [](const resource_statistics& stats) {
        return "ResourceStatistics(bytes=(" + counter_repr(stats.bytes) + "), allocations=(" +
               counter_repr(stats.allocations) + "))";
      });

  nb::class_<stream_statistics>(module, "StreamStatistics", "The counters of the events ordered on one stream.")
      .def_prop_ro("stream", [](const stream_statistics& stats) { return stream_int(stats.stream); })
      .def_ro("statistics", &stream_statistics::statistics)
      .def("__repr__", [](const stream_statistics& stats) {
        return "StreamStatistics(stream=" + std::to_string(stream_int(stats.stream)) + ", bytes=(" +
               counter_repr(stats.statistics.bytes) + "), allocations=(" + counter_repr(stats.statistics.allocations) +
               "))";
      });

  nb::class_<cache_statistics>(module, "CacheStatistics", "What a CachingResource has done and holds.")
      .def_ro("hits", &cache_statistics::hits)
      .def_ro("misses", &cache_statistics::misses)
      .def_ro("cached_bytes", &cache_statistics::cached_bytes)
      .def_ro("cached_blocks", &cache_statistics::cached_blocks)
      .def_ro("max_cached_bytes", &cache_statistics::max_cached_bytes)
      .def_ro("events_recorded", &cache_statistics::events_recorded)
      .def_ro("cross_stream_reuses", &cache_statistics::cross_stream_reuses)
      .def_ro("upstream_reserved", &cache_statistics::upstream_reserved)
      .def("__repr__", [](const cache_statistics& stats) {
        return "CacheStatistics(hits=" + std::to_string(stats.hits) + ", misses=" + std::to_string(stats.misses) +
               ", cached_bytes=" + std::to_string(stats.cached_bytes) +
               ", cached_blocks=" + std::to_string(stats.cached_blocks) +
               ", max_cached_bytes=" + std::to_string(stats.max_cached_bytes) +
               ", upstream_reserved=" + optional_repr(stats.upstream_reserved) + ")";
      });
}

void bind_coalescing_statistics(nb::module_& module) {
  nb::class_<coalescing_statistics>(module, "CoalescingStatistics", "What a CoalescingResource holds and has done.")
      .def_ro("reserved_bytes", &coalescing_statistics::reserved_bytes)
      .def_ro("reserved_peak", &coalescing_statistics::reserved_peak)
      .def_ro("segments", &coalescing_statistics::segments)
      .def_ro("used_bytes", &coalescing_statistics::used_bytes)
      .def_ro("used_peak", &coalescing_statistics::used_peak)
      .def_ro("segment_allocations", &coalescing_statistics::segment_allocations)
      .def_ro("segment_frees", &coalescing_statistics::segment_frees)
      .def_ro("pending_blocks", &coalescing_statistics::pending_blocks)
      .def_ro("retired_blocks", &coalescing_statistics::retired_blocks)
      .def_ro("segments_adopted", &coalescing_statistics::segments_adopted)
      .def("__repr__", [](const coalescing_statistics& stats) {
        return "CoalescingStatistics(reserved_bytes=" + std::to_string(stats.reserved_bytes) +
               ", reserved_peak=" + std::to_string(stats.reserved_peak) + ", segments=" +
               std::to_string(stats.segments) + ", used_bytes=" + std::to_string(stats.used_bytes) +
               ", used_peak=" + std::to_string(stats.used_peak) + ")";
      });
}

/// One of tracking_adaptor::outstanding()'s records, keyed as a history's events are.
nb::dict record_dict(const allocation_record& record) {
  nb::dict result;
  result["address"] = reinterpret_cast<std::uintptr_t>(record.pointer);
  result["bytes"] = record.bytes;
  result["alignment"] = record.alignment;
  result["stream"] = stream_int(record.stream);
  result["thread"] = record.thread;
  result["sequence"] = record.sequence;
  result["call_stack"] = return_addresses(record.call_stack);
  return result;
}

/// A resource's state() as a dict, None where it does not know.
nb::dict state_dict(const stream_ordered_resource& self) {
  resource_state state;
  {
    // Reading takes the resources' locks: no Python is needed meanwhile, and
    // no thread holding one should wait on us.
    nb::gil_scoped_release unlocked;
    state = self.state();
  }
  const auto optional = [](const std::optional<std::size_t>& value) -> nb::object {
    return value ? nb::object(nb::int_(*value)) : nb::none();
  };
  nb::dict by_stream;
  for (const stream_bytes& each : state.cached_bytes_by_stream) by_stream[nb::int_(stream_int(each.stream))] = each.bytes;
  nb::dict result;
  result["name"] = state.name;
  result["kind"] = std::string(to_string(state.kind));
  result["device"] = state.device;
  result["used_bytes"] = optional(state.used_bytes);
  result["peak_used_bytes"] = optional(state.peak_used_bytes);
  result["reserved_bytes"] = optional(state.reserved_bytes);
  result["peak_reserved_bytes"] = optional(state.peak_reserved_bytes);
  result["cached_bytes"] = optional(state.cached_bytes);
  result["cached_bytes_by_stream"] = by_stream;
  result["largest_free_block"] = optional(state.largest_free_block);
  result["cap_bytes"] = optional(state.cap_bytes);
  result["releasable_bytes"] = optional(state.releasable_bytes);
  result["numa_node"] = state.numa_node ? nb::object(nb::int_(*state.numa_node)) : nb::none();
  result["note"] = state.note;
  return result;
}

/// The base class: what every resource and adaptor offers. Every call that
/// may block (an allocation or free can wait for the device or a file)
/// releases the GIL, so that host callbacks and other threads that need it go on.
void bind_base(nb::module_& module) {
  // Weak references let a callback or a cache name a resource without keeping it alive.
  nb::class_<stream_ordered_resource>(
      module, "MemoryResource", nb::is_weak_referenceable(),
      "A cudapmr memory resource: stream-ordered allocation of one kind of memory. Not constructed directly.")
      .def(
          "allocate",
          [](nb::handle self, const count& bytes, nb::handle stream) {
            return allocate_buffer(self, nb::cast<stream_ordered_resource&>(self), bytes.get("allocate: nbytes"),
                                   stream);
          },
          "nbytes"_a, nb::kw_only(), "stream"_a.none() = nb::none(), nb::rv_policy::take_ownership,
          "A Buffer of `nbytes` allocated in stream order on `stream` (None: the legacy default stream).")
      .def(
          "allocate_raw",
          [](stream_ordered_resource& self, const count& bytes, nb::handle stream, const count& alignment) {
            const std::size_t checked = bytes.get("allocate_raw: nbytes");
            const std::size_t aligned_to = alignment.get("allocate_raw: alignment");
            const cudaStream_t on = stream_handle(stream);
            nb::gil_scoped_release unlocked;
            return reinterpret_cast<std::uintptr_t>(self.allocate_async(checked, aligned_to, on));
          },
          "nbytes"_a, "stream"_a.none() = nb::none(), "alignment"_a = default_alignment,
          "Allocates `nbytes` in stream order on `stream` and returns the address (an int).")
      .def(
          "deallocate_raw",
          [](stream_ordered_resource& self, std::uintptr_t pointer, const count& bytes, nb::handle stream,
             const count& alignment) {
            const std::size_t checked = bytes.get("deallocate_raw: nbytes");
            const std::size_t aligned_to = alignment.get("deallocate_raw: alignment");
            const cudaStream_t on = stream_handle(stream);
            nb::gil_scoped_release unlocked;
            self.deallocate_async(reinterpret_cast<void*>(pointer), checked, aligned_to, on);
          },
          "ptr"_a, "nbytes"_a, "stream"_a.none() = nb::none(), "alignment"_a = default_alignment,
          "Frees an address from allocate_raw in stream order on `stream`; sizes must match. Never raises for "
          "the free itself.")
      .def_prop_ro("kind", [](const stream_ordered_resource& self) { return std::string(to_string(self.kind())); },
                   "\"device\", \"pinned\", \"managed\" or \"pageable\".")
      .def_prop_ro("device_id", &stream_ordered_resource::device_id,
                   "The device the memory belongs to; -1 where it belongs to no one device.")
      .def_prop_ro("is_device_accessible", &stream_ordered_resource::is_device_accessible)
      .def_prop_ro("is_host_accessible", &stream_ordered_resource::is_host_accessible)
      .def_prop_ro("description", &stream_ordered_resource::description)
      .def("state", &state_dict,
           "What the resource reports of itself, a dict: name, kind, device, used_bytes, peak_used_bytes, "
           "reserved_bytes, peak_reserved_bytes, cached_bytes, cached_bytes_by_stream ({stream: bytes}), "
           "largest_free_block, cap_bytes, releasable_bytes, numa_node; None where it does not know; and note, "
           "why it is not where it was asked to be (empty when it is).")
      .def_prop_ro(
          "upstream", [](const stream_ordered_resource& self) { return self.upstream(); },
          nb::rv_policy::reference_internal,
          "The resource this one draws from (None for a leaf); it lives as long as this one.")
      .def(
          "trim",
          [](stream_ordered_resource& self, nb::handle stream) {
            const cudaStream_t on = stream_handle(stream);
            nb::gil_scoped_release unlocked;
            self.trim(on);
          },
          "stream"_a.none() = nb::none(),
          "Gives back to the system what the stack holds and hands out to no one (caches, free segments, a pool's "
          "reserve, except a managed pool's that keeps its pages), after the frees queued on `stream`. May wait for "
          "the device.")
      .def("__repr__",
           [](const stream_ordered_resource& self) { return "<cudapmr " + self.description() + ">"; });
}

void bind_kinds(nb::module_& module) {
  nb::class_<pool_resource, stream_ordered_resource>(module, "PoolResource",
                                                     "A resource over one CUDA memory pool.")
      .def_prop_ro("owns_pool", &pool_resource::owns_pool)
      .def_prop_ro("pool_handle", [](const pool_resource& self) { return reinterpret_cast<std::uintptr_t>(self.pool()); })
      .def("statistics", &pool_resource::stats, nb::call_guard<nb::gil_scoped_release>(),
           "The pool's counters, a PoolStatistics.")
      .def("reset_peaks", &pool_resource::reset_peaks)
      .def(
          "trim_to",
          [](pool_resource& self, const count& bytes) {
            const std::size_t keep = bytes.get("trim_to: nbytes");
            nb::gil_scoped_release unlocked;
            self.trim_to(keep);
          },
          "nbytes"_a, "Releases unused pool memory until at most `nbytes` stay reserved (none where the pool keeps "
                      "its pages).")
      .def_prop_ro("gives_memory_back", &pool_resource::gives_memory_back,
                   "False for a managed pool with no preferred location, which keeps every page it took (with driver "
                   "580.159, memory such a pool handed out again after releasing pages lost what the device wrote).")
      .def_prop_rw("release_threshold", &pool_resource::release_threshold,
                   [](pool_resource& self, const count& bytes) {
                     self.set_release_threshold(bytes.get("PoolResource.release_threshold"));
                   })
      .def_prop_ro("placement_note", &pool_resource::placement_note,
                   "Why the pool is not where it was asked to be (a NUMA node CUDA refused); empty when it is.");

  const count_fields<device_pool_options> device_counts{"DeviceMemoryResourceOptions",
                                                        {{"initial_size", &device_pool_options::initial_size},
                                                         {"max_size", &device_pool_options::max_size},
                                                         {"release_threshold", &device_pool_options::release_threshold}}};
  nb::class_<device_pool_options> device_options(module, "DeviceMemoryResourceOptions",
                                                 "Options of an owned device pool.");
  device_options
      .def(
          "__init__",
          [](device_pool_options* self, const count& initial_size, const count& max_size,
             const count& release_threshold, bool ipc_enabled) {
            new (self) device_pool_options{initial_size.get("DeviceMemoryResourceOptions: initial_size"),
                                           max_size.get("DeviceMemoryResourceOptions: max_size"),
                                           release_threshold.get("DeviceMemoryResourceOptions: release_threshold"),
                                           ipc_enabled};
          },
          nb::kw_only(), "initial_size"_a = 0, "max_size"_a = 0, "release_threshold"_a = keep_all_memory,
          "ipc_enabled"_a = false)
      .def_rw("ipc_enabled", &device_pool_options::ipc_enabled)
      .def("__repr__", [device_counts](const device_pool_options& options) {
        return device_counts.repr_start(options) + "ipc_enabled=" + (options.ipc_enabled ? "True" : "False") + ")";
      });
  device_counts.bind(device_options);

  const count_fields<pinned_pool_options> pinned_counts{"PinnedMemoryResourceOptions",
                                                        {{"initial_size", &pinned_pool_options::initial_size},
                                                         {"max_size", &pinned_pool_options::max_size},
                                                         {"release_threshold", &pinned_pool_options::release_threshold}}};
  nb::class_<pinned_pool_options> pinned_options(module, "PinnedMemoryResourceOptions",
                                                 "Options of an owned pinned host pool.");
  pinned_options
      .def(
          "__init__",
          [](pinned_pool_options* self, const count& initial_size, const count& max_size,
             const count& release_threshold, std::optional<int> numa_node) {
            new (self) pinned_pool_options{initial_size.get("PinnedMemoryResourceOptions: initial_size"),
                                           max_size.get("PinnedMemoryResourceOptions: max_size"),
                                           release_threshold.get("PinnedMemoryResourceOptions: release_threshold"),
                                           numa_node};
          },
          nb::kw_only(), "initial_size"_a = 0, "max_size"_a = 0, "release_threshold"_a = keep_all_memory,
          "numa_node"_a.none() = nb::none(),
          "numa_node: the host NUMA node of the pool's pages; None: the node nearest the current device; "
          "ANY_NUMA_NODE: wherever the kernel puts them.")
      .def_rw("numa_node", &pinned_pool_options::numa_node)
      .def("__repr__", [pinned_counts](const pinned_pool_options& options) {
        return pinned_counts.repr_start(options) + "numa_node=" + optional_int_repr(options.numa_node) + ")";
      });
  pinned_counts.bind(pinned_options);

  const count_fields<managed_pool_options> managed_counts{
      "ManagedMemoryResourceOptions",
      {{"initial_size", &managed_pool_options::initial_size},
       {"release_threshold", &managed_pool_options::release_threshold}}};
  nb::class_<managed_pool_options> managed_options(module, "ManagedMemoryResourceOptions",
                                                   "Options of an owned managed pool.");
  managed_options
      .def(
          "__init__",
          [](managed_pool_options* self, const count& initial_size, const count& release_threshold,
             std::optional<int> preferred_device) {
            new (self) managed_pool_options{initial_size.get("ManagedMemoryResourceOptions: initial_size"),
                                            release_threshold.get("ManagedMemoryResourceOptions: release_threshold"),
                                            preferred_device};
          },
          nb::kw_only(), "initial_size"_a = 0, "release_threshold"_a = keep_all_memory,
          "preferred_device"_a.none() = nb::none())
      .def_rw("preferred_device", &managed_pool_options::preferred_device)
      .def("__repr__", [managed_counts](const managed_pool_options& options) {
        return managed_counts.repr_start(options) + "preferred_device=" + optional_int_repr(options.preferred_device) +
               ")";
      });
  managed_counts.bind(managed_options);

  nb::class_<device_memory_resource, pool_resource>(
      module, "DeviceMemoryResource",
      "Device memory of one GPU: the device's default pool, or an owned pool when options are given.")
      .def(
          "__init__",
          [](device_memory_resource* self, int device, std::optional<device_pool_options> options) {
            if (options)
              new (self) device_memory_resource(device, *options);
            else
              new (self) device_memory_resource(device);
          },
          "device_id"_a = 0, "options"_a.none() = nb::none())
      .def("enable_access_from", &device_memory_resource::enable_access_from, "device_id"_a)
      .def("disable_access_from", &device_memory_resource::disable_access_from, "device_id"_a)
      .def("is_accessible_from", &device_memory_resource::is_accessible_from, "device_id"_a);

  nb::class_<pinned_memory_resource, pool_resource>(
      module, "PinnedMemoryResource",
      "Pinned host memory that every device reaches: the default pinned pool, or an owned one with options.")
      .def(
          "__init__",
          [](pinned_memory_resource* self, std::optional<pinned_pool_options> options, std::optional<int> numa_node) {
            if (numa_node) {  // the options' field as a keyword of its own: an owned pool on that node
              if (options && options->numa_node && *options->numa_node != *numa_node)
                throw nb::value_error(("numa_node=" + std::to_string(*numa_node) + " and options.numa_node=" +
                                       std::to_string(*options->numa_node) + " name different nodes")
                                          .c_str());
              if (!options) options.emplace();
              options->numa_node = numa_node;
            }
            construct_kind(self, options);
          },
          "options"_a.none() = nb::none(), nb::kw_only(), "numa_node"_a.none() = nb::none(),
          "numa_node: an owned pool on that host NUMA node (ANY_NUMA_NODE: wherever the kernel puts the pages), "
          "as PinnedMemoryResourceOptions(numa_node=) gives; None: as the options say (without options, the "
          "default pinned pool of the node nearest the current device).")
      .def_prop_ro("numa_node", &pinned_memory_resource::numa_node,
                   "The host NUMA node the pool's pages are on; None where the kernel chooses (placement_note says why).");

  nb::class_<managed_memory_resource, pool_resource>(
      module, "ManagedMemoryResource",
      "Managed (unified) memory: the default managed pool, or an owned one with options.")
      .def("__init__", &construct_kind<managed_memory_resource, managed_pool_options>, "options"_a.none() = nb::none());

  nb::class_<host_memory_resource, stream_ordered_resource>(
      module, "HostMemoryResource",
      "Pageable host memory behind the same interface (no GPU needed); streams are accepted and ignored.")
      .def(
          "__init__",
          [](host_memory_resource* self, const count& capacity) {
            new (self) host_memory_resource(capacity.get("HostMemoryResource: capacity"));
          },
          "capacity"_a = std::numeric_limits<std::size_t>::max())
      .def_prop_ro("used_bytes", &host_memory_resource::used_bytes)
      .def_prop_ro("capacity", &host_memory_resource::capacity);

  nb::class_<device_malloc_resource, stream_ordered_resource>(
      module, "DeviceMallocResource", "Device memory from cudaMalloc, no pool: the frugal upstream of a cache.")
      .def(nb::init<int>(), "device_id"_a = 0)
      .def_prop_ro("allocated_bytes", &device_malloc_resource::allocated_bytes)
      .def_prop_ro("allocated_bytes_high", &device_malloc_resource::allocated_bytes_high)
      .def("release", &device_malloc_resource::release, nb::call_guard<nb::gil_scoped_release>());

  nb::class_<virtual_memory_resource, stream_ordered_resource>(
      module, "VirtualMemoryResource",
      "Device memory on the driver's virtual memory calls: reserved address ranges, pages mapped per "
      "allocation and unmapped once the work before their free is done, never with a device-wide synchronize.")
      .def(
          "__init__",
          [](virtual_memory_resource* self, int device, const count& reserve_bytes, bool exportable) {
            new (self) virtual_memory_resource(
                device, {.reserve_bytes = reserve_bytes.get("VirtualMemoryResource: reserve_bytes"), .exportable = exportable});
          },
          "device_id"_a = 0, nb::kw_only(), "reserve_bytes"_a = 0, "exportable"_a = true)
      .def_prop_ro("mapped_bytes", &virtual_memory_resource::mapped_bytes)
      .def_prop_ro("mapped_bytes_high", &virtual_memory_resource::mapped_bytes_high)
      .def_prop_ro("allocated_bytes", &virtual_memory_resource::allocated_bytes)
      .def_prop_ro("pending_bytes", &virtual_memory_resource::pending_bytes)
      .def_prop_ro("granularity", &virtual_memory_resource::granularity)
      .def_prop_ro("reserved_address_bytes", &virtual_memory_resource::reserved_address_bytes)
      .def_prop_ro("address_reservations", &virtual_memory_resource::address_reservations)
      .def("release_completed", &virtual_memory_resource::release_completed, nb::call_guard<nb::gil_scoped_release>())
      .def("release", &virtual_memory_resource::release, nb::call_guard<nb::gil_scoped_release>());

  nb::class_<device_stack, stream_ordered_resource>(
      module, "DeviceStack",
      "The default stack for device memory: a per-stream cache of blocks up to 4 MiB over a best-fit "
      "coalescing engine over the virtual-memory leaf; state() and snapshots show each layer.")
      .def(
          "__init__",
          [](device_stack* self, int device_id, bool hand_back_before_large, const std::optional<count>& stream_share) {
            device_stack_options options;
            options.front.hand_back_before_large = hand_back_before_large;
            options.front.stream_share = get(stream_share, "DeviceStack: stream_share");
            new (self) device_stack(device_id, options);
          },
          "device_id"_a = 0, nb::kw_only(), "hand_back_before_large"_a = device_stack_options{}.front.hand_back_before_large,
          "stream_share"_a = nb::none(),
          "hand_back_before_large: before a request past 4 MiB, the front hands its stream's freed blocks to the "
          "engine (less memory where sizes change from step to step; off: faster where small requests go between "
          "frequent large ones); stream_share: bytes a stream keeps freed before the front offers them to every "
          "stream (None: half the recent peak of what is live split among the streams freeing lately, 4 MiB to an eighth of "
          "the front's budget; smaller: less held by many streams, an event per offer).")
      .def("release", &device_stack::release, nb::call_guard<nb::gil_scoped_release>(),
           "Hands everything back; frees the memory of graphs captured over it (synchronizes the device).");
  module.def("default_device_stack", &default_device_stack, "device_id"_a = 0, nb::rv_policy::reference,
             "The process's DeviceStack of a device, made on first use and never destroyed.");

  module.def("default_device_resource", &default_device_resource, "device_id"_a = 0, nb::rv_policy::reference,
             "The per-device default resource over the device's default pool (like Device.memory_resource).");
}

void bind_adaptors(nb::module_& module) {
  nb::class_<resource_adaptor, stream_ordered_resource>(module, "ResourceAdaptor",
                                                        "A resource over an upstream resource it keeps alive.");

  nb::class_<caching_resource, resource_adaptor>(
      module, "CachingResource",
      "A bounded cache of freed blocks by size class over any resource, shared between streams in a safe order.")
      .def(
          "__init__",
          [](caching_resource* self, stream_ordered_resource& upstream, const count& max_cached_block,
             const std::optional<count>& max_cached_bytes, bool check_capture, double shrink_interval,
             bool hand_back_before_large, const std::optional<count>& stream_share,
             std::optional<double> max_cached_per_live) {
            if (!(shrink_interval >= 0.0))  // also NaN
              throw nb::value_error(
                  ("shrink_interval must be a number of seconds >= 0; got " + std::to_string(shrink_interval)).c_str());
            // Whole milliseconds, rounded up: a positive interval never becomes 0 (shrink at once).
            const auto interval =
                std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(std::min(shrink_interval, 1e9) * 1000.0)));
            new (self) caching_resource(upstream, caching_options{.max_cached_block = max_cached_block.get(
                                                                      "CachingResource: max_cached_block"),
                                                                  .max_cached_bytes = get(
                                                                      max_cached_bytes, "CachingResource: max_cached_bytes"),
                                                                  .check_capture = check_capture,
                                                                  .shrink_interval = interval,
                                                                  .max_cached_per_live = max_cached_per_live,
                                                                  .hand_back_before_large = hand_back_before_large,
                                                                  .stream_share = get(
                                                                      stream_share, "CachingResource: stream_share")});
          },
          "upstream"_a, nb::kw_only(), "max_cached_block"_a = caching_options{}.max_cached_block,
          "max_cached_bytes"_a = nb::none(), "check_capture"_a = true,
          "shrink_interval"_a = std::chrono::duration<double>(caching_options{}.shrink_interval).count(),
          "hand_back_before_large"_a = false, "stream_share"_a = nb::none(), "max_cached_per_live"_a = nb::none(),
          nb::keep_alive<1, 2>(),
          "max_cached_bytes: the budget (None: an eighth of the upstream device's memory, 1 GiB for host "
          "memory); shrink_interval: seconds per eighth that what the cache may keep falls while what is "
          "live stays below its recent peak; hand_back_before_large: a request past max_cached_block first "
          "hands the blocks its stream freed back upstream (for an upstream that merges them); stream_share: "
          "bytes a stream keeps freed before it offers them to every stream (None: half the recent peak of what is "
          "live split among the streams freeing lately, 4 MiB to an eighth of the budget); max_cached_per_live: "
          "keep at most this many times what is live now (never below the cache's floor of some MiB), with no "
          "memory of the peak (for an upstream that merges what it gets back, as CoalescingResource does; "
          "DeviceStack's front uses 4).")
      .def("statistics", &caching_resource::statistics, nb::call_guard<nb::gil_scoped_release>(), "A CacheStatistics.")
      .def("release", &caching_resource::release, nb::call_guard<nb::gil_scoped_release>(),
           "Hands every cached block back upstream.");
  module.def("default_pinned_resource", &default_pinned_resource, nb::rv_policy::reference,
             "The process's cached pinned resource: a CachingResource over the default pinned pool.");
  module.def("default_managed_resource", &default_managed_resource, nb::rv_policy::reference,
             "The process's cached managed resource: a CachingResource over the default managed pool.");

  bind_coalescing_statistics(module);
  nb::class_<coalescing_resource, resource_adaptor>(
      module, "CoalescingResource",
      "Blocks carved from large upstream segments, best fit, split and merged: as frugal as PyTorch's allocator.")
      .def(
          "__init__",
          [](coalescing_resource* self, stream_ordered_resource& upstream, const count& small_request,
             const count& small_segment, const count& segment_granularity, bool check_capture,
             const count& shared_large_segment, const std::optional<count>& max_idle_bytes) {
            const coalescing_options options{
                .small_request = small_request.get("CoalescingResource: small_request"),
                .small_segment = small_segment.get("CoalescingResource: small_segment"),
                .segment_granularity = segment_granularity.get("CoalescingResource: segment_granularity"),
                .check_capture = check_capture,
                .shared_large_segment = shared_large_segment.get("CoalescingResource: shared_large_segment"),
                .max_idle_bytes = get(max_idle_bytes, "CoalescingResource: max_idle_bytes")};
            new (self) coalescing_resource(upstream, options);
          },
          "upstream"_a, nb::kw_only(), "small_request"_a = coalescing_options{}.small_request,
          "small_segment"_a = coalescing_options{}.small_segment,
          "segment_granularity"_a = coalescing_options{}.segment_granularity, "check_capture"_a = true,
          "shared_large_segment"_a = 0, "max_idle_bytes"_a = nb::none(), nb::keep_alive<1, 2>(),
          "small_request: requests up to this share small_segment-byte segments; larger ones get segments of "
          "their size rounded up to segment_granularity (at least the smaller of shared_large_segment and a 32nd "
          "of what is in use), split and merged as blocks are allocated and freed; max_idle_bytes: the wholly free "
          "segments kept at frees (at least half the most in use lately) before the rest go back upstream, so "
          "that what it holds follows what is live (None: they stay until reused, release() or trim()).")
      .def("statistics", &coalescing_resource::statistics, nb::call_guard<nb::gil_scoped_release>(),
           "A CoalescingStatistics.")
      .def(
          "release_idle",
          [](coalescing_resource& self, const std::optional<count>& keep) {
            const std::optional<std::size_t> kept = get(keep, "release_idle: keep");
            nb::gil_scoped_release unlocked;
            return kept ? self.release_idle(*kept) : self.release_idle();
          },
          "keep"_a.none() = nb::none(),
          "Hands back wholly free segments that no queued work can touch until at most `keep` idle bytes stay "
          "(None: max_idle_bytes, or 0); never waits. Returns the bytes handed back.")
      .def("release", &coalescing_resource::release, nb::call_guard<nb::gil_scoped_release>(),
           "Hands every wholly free segment back upstream.");

  nb::class_<statistics_adaptor, resource_adaptor>(
      module, "StatisticsAdaptor", "Counts bytes and allocations (current, peak, total), overall and per stream.")
      .def(
          "__init__",
          [](statistics_adaptor* self, stream_ordered_resource& upstream, bool per_stream) {
            new (self) statistics_adaptor(upstream, statistics_options{per_stream});
          },
          "upstream"_a, nb::kw_only(), "per_stream"_a = true, nb::keep_alive<1, 2>())
      .def(
          "statistics",
          [](const statistics_adaptor& self, nb::handle stream) {
            if (stream.is_none()) return self.statistics();
            if (!self.counts_per_stream())  // its zeros would read as a stream that allocated nothing
              throw nb::value_error("statistics(stream=...): this StatisticsAdaptor counts no stream on its own "
                                    "(per_stream=False); ask statistics() for every stream");
            return self.statistics(stream_handle(stream));
          },
          "stream"_a.none() = nb::none(), "Counters over every stream, or of one stream (per_stream=True only).")
      .def_prop_ro("per_stream_counting", &statistics_adaptor::counts_per_stream,
                   "Whether counters are kept per stream too (per_stream= at construction).")
      .def("per_stream", &statistics_adaptor::per_stream, "A list of StreamStatistics.")
      .def("reset_peak", &statistics_adaptor::reset_peak);

  nb::class_<limiting_adaptor, resource_adaptor>(module, "LimitingAdaptor",
                                                 "Refuses allocations past a cap of bytes outstanding.")
      .def(
          "__init__",
          [](limiting_adaptor* self, stream_ordered_resource& upstream, const count& cap) {
            new (self) limiting_adaptor(upstream, cap.get("LimitingAdaptor: cap"));
          },
          "upstream"_a, "cap"_a, nb::keep_alive<1, 2>())
      .def_prop_ro("cap", &limiting_adaptor::cap)
      .def_prop_ro("used_bytes", &limiting_adaptor::used_bytes);

  nb::class_<tracking_adaptor, resource_adaptor>(
      module, "TrackingAdaptor", "Remembers every outstanding allocation; reports leaks and bad frees.")
      .def(
          "__init__",
          [](tracking_adaptor* self, stream_ordered_resource& upstream, bool capture_call_stacks,
             const count& freed_history) {
            tracking_options options;
            options.capture_call_stacks = capture_call_stacks;
            options.freed_history = freed_history.get("TrackingAdaptor: freed_history");
            new (self) tracking_adaptor(upstream, std::move(options));
          },
          "upstream"_a, nb::kw_only(), "capture_call_stacks"_a = false, "freed_history"_a = 4096,
          nb::keep_alive<1, 2>())
      .def(
          "deallocate_checked",
          [](tracking_adaptor& self, std::uintptr_t pointer, const count& bytes, nb::handle stream,
             const count& alignment) {
            const std::size_t checked = bytes.get("deallocate_checked: nbytes");
            const std::size_t aligned_to = alignment.get("deallocate_checked: alignment");
            const cudaStream_t on = stream_handle(stream);
            nb::gil_scoped_release unlocked;
            self.deallocate_checked(reinterpret_cast<void*>(pointer), checked, aligned_to, on);
          },
          "ptr"_a, "nbytes"_a, "stream"_a.none() = nb::none(), "alignment"_a = default_alignment,
          "deallocate_raw that raises MisuseError for a bad free (which then frees nothing).")
      .def(
          "outstanding",
          [](const tracking_adaptor& self) { return dicts_of(self.outstanding(), record_dict); },
          "The outstanding allocations, oldest first: dicts with address, bytes, alignment, stream, thread, "
          "sequence and call_stack (return addresses, innermost first; empty unless captured).")
      .def_prop_ro("outstanding_count", &tracking_adaptor::outstanding_count)
      .def_prop_ro("outstanding_bytes", &tracking_adaptor::outstanding_bytes)
      .def("leak_report", &tracking_adaptor::leak_report);

  nb::class_<logging_adaptor, resource_adaptor>(module, "LoggingAdaptor",
                                                "Writes one CSV line per allocation event to a file.")
      .def(
          "__init__",
          [](logging_adaptor* self, stream_ordered_resource& upstream, const std::filesystem::path& path,
             const count& buffer_bytes) {
            new (self) logging_adaptor(upstream, path, logging_options{buffer_bytes.get("LoggingAdaptor: buffer_bytes")});
          },
          "upstream"_a, "path"_a, nb::kw_only(), "buffer_bytes"_a = logging_options{}.buffer_bytes,
          nb::keep_alive<1, 2>())
      .def("flush", &logging_adaptor::flush, nb::call_guard<nb::gil_scoped_release>());
}

void bind_current_resource(nb::module_& module) {
  module.def(
      "_current_device_resource",
      [](std::optional<int> device) -> stream_ordered_resource& {
        return device ? current_device_resource(*device) : current_device_resource();
      },
      "device_id"_a.none() = nb::none(), nb::rv_policy::reference);
  module.def(
      "_set_current_device_resource",
      [](stream_ordered_resource& resource, std::optional<int> device) -> stream_ordered_resource& {
        return device ? set_current_device_resource(*device, resource) : set_current_device_resource(resource);
      },
      "resource"_a, "device_id"_a.none() = nb::none(), nb::rv_policy::reference);
}

}  // namespace

void bind_resources(nb::module_& module) {
  bind_statistics(module);
  bind_base(module);
  bind_kinds(module);
  bind_adaptors(module);
  bind_current_resource(module);
}

}  // namespace cudapmr::python
