// SPDX-License-Identifier: Apache-2.0
// The C entry points that torch.cuda.memory.CUDAPluggableAllocator loads from
// this module's file: allocations of each device go to the cudapmr resource
// registered for it from Python (cudapmr.torch), and the optional hooks
// (record_stream, empty_cache, the memory fraction) act on them. They live in
// the module itself so that the registry is the one Python sets, with no
// second copy of the library in the process.
#include "bindings.hpp"
#include "torch_out_of_memory.hpp"

#include <cudapmr/detail/stream_ordering.hpp>
#include <cudapmr/device.hpp>
#include <cudapmr/error.hpp>
#include <cudapmr/memory_snapshot.hpp>
#include <cudapmr/snapshot_export.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include <nanobind/stl/string.h>

namespace nb = nanobind;
using namespace nb::literals;

namespace cudapmr::python {
namespace {

constexpr int max_devices = 64;

/// The resource of each device; null where none is registered.
std::array<std::atomic<stream_ordered_resource*>, max_devices> torch_resources{};

/// What the bridge knows of a block it handed to PyTorch: the resource it came
/// from (it goes back there even after another is registered for its device;
/// registered resources are never destroyed, so the pointer stays valid), its
/// device and stream, and the other streams record_stream named.
struct torch_block {
  stream_ordered_resource* resource = nullptr;
  std::size_t bytes = 0;
  int device = 0;
  cudaStream_t stream = nullptr;
  std::vector<cudaStream_t> used_on;
  /// Its place among the blocks handed out, for the snapshot's order.
  std::uint64_t sequence = 0;
};
std::mutex blocks_mutex;
// Never destroyed, as the history below: PyTorch frees tensors as late as
// the interpreter's shutdown, after static destructors may have run.
std::unordered_map<void*, torch_block>& blocks = *new std::unordered_map<void*, torch_block>();
std::uint64_t blocks_handed_out = 0;  // guarded by blocks_mutex

/// PyTorch's counts of one device that only the bridge can keep (its
/// memory_stats keys "allocation.all.*", "allocated_bytes.all.allocated" and
/// "freed", "num_ooms"). Guarded by blocks_mutex.
struct device_counts {
  std::size_t blocks = 0;
  std::size_t peak_blocks = 0;
  std::uint64_t allocations = 0;
  std::uint64_t frees = 0;
  std::uint64_t bytes_allocated = 0;
  std::uint64_t bytes_freed = 0;
  std::uint64_t refusals = 0;
};

/// The bridge's history of PyTorch's allocations, frees and refusals, for
/// cudapmr.torch's snapshots: PyTorch's own _record_memory_history raises for
/// a pluggable allocator. Off (a limit of 0) until cudapmr.torch turns it on;
/// past the limit the oldest events go. One history for every device.
/// Not a history_adaptor over the registered resource: the memory fraction's
/// refusals happen here, before any resource, and PyTorch's default limit is
/// unbounded, which that adaptor's ring, allocated whole, cannot follow.
/// Guarded by blocks_mutex.
struct device_event {
  int device = 0;
  history_event event;
};
struct recorded_history {
  std::size_t limit = 0;
  std::deque<device_event> events;
  std::uint64_t dropped = 0;
  std::uint64_t sequence = 0;
};

// Guarded by blocks_mutex, as the blocks are.
std::array<device_counts, max_devices> counts;
recorded_history& history = *new recorded_history();
/// Whether the history is on, read without the lock by a refusal, which
/// asks CUDA for the device's free memory only then.
std::atomic<bool> recording{false};

/// Adds an event to the history where it is on; the caller holds blocks_mutex.
/// A history that cannot grow drops the event (counted): recording never
/// fails an allocation or a free.
void record_event(int device, history_action action, void* pointer, std::size_t bytes, cudaStream_t stream,
                  std::optional<std::size_t> device_free_bytes = std::nullopt) noexcept {
  if (history.limit == 0) return;
  try {
    while (history.events.size() >= history.limit) {
      history.events.pop_front();
      ++history.dropped;
    }
    history_event event;
    event.action = action;
    event.sequence = ++history.sequence;
    event.time_ns = history_clock_ns();
    event.pointer = pointer;
    event.bytes = bytes;
    event.alignment = default_alignment;
    event.stream = stream_ref(stream);
    event.device_free_bytes = device_free_bytes;
    history.events.push_back({device, std::move(event)});
  } catch (...) {
    ++history.dropped;
  }
}

/// Bytes each device's blocks hold, and the most they held.
std::array<std::atomic<std::size_t>, max_devices> bytes_in_use{};
std::array<std::atomic<std::size_t>, max_devices> peak_bytes{};

void raise_peak(std::size_t slot, std::size_t held) noexcept {
  std::size_t peak = peak_bytes[slot].load(std::memory_order_relaxed);
  while (held > peak && !peak_bytes[slot].compare_exchange_weak(peak, held, std::memory_order_relaxed)) {
  }
}

/// The memory fraction PyTorch set for a device and the bytes it allows
/// (the largest size_t where none was set).
struct memory_fraction {
  std::atomic<double> fraction{1.0};
  std::atomic<std::size_t> cap{std::numeric_limits<std::size_t>::max()};
};
std::array<memory_fraction, max_devices> fractions;

/// Counts of the hooks' work, for cudapmr.torch's statistics.
std::atomic<std::uint64_t> frees_after_other_streams{0};
std::atomic<std::uint64_t> empty_cache_calls{0};

/// Whether PyTorch made the bridge its current allocator: it initializes only
/// the current one, at its CUDA lazy init, with the device count. A refusal
/// then raises torch.OutOfMemoryError, since PyTorch takes a null from the
/// current allocator for a block; in a MemPool it retries and raises itself.
std::atomic<bool> is_current_allocator{false};

/// The message of the last refused allocation or free, for Python to show.
/// Never destroyed, as `blocks`: a free at the interpreter's shutdown may refuse.
std::mutex last_error_mutex;
std::string& last_error = *new std::string();

bool valid_device(int device) noexcept { return device >= 0 && device < max_devices; }

stream_ordered_resource* resource_of(int device) noexcept {
  if (!valid_device(device)) return nullptr;
  return torch_resources[static_cast<std::size_t>(device)].load(std::memory_order_acquire);
}

void remember_failure(const std::string& message) noexcept {
  try {
    const std::lock_guard lock(last_error_mutex);
    last_error = message;
  } catch (...) {
  }
  std::fprintf(stderr, "cudapmr torch allocator: %s\n", message.c_str());
}

/// remember_failure of `first` followed by `second`, for callers that must
/// not throw: with no memory for the message, it is printed alone.
void remember_failure(const char* first, const char* second) noexcept {
  try {
    remember_failure(std::string(first) + second);
  } catch (...) {
    std::fprintf(stderr, "cudapmr torch allocator: %s%s\n", first, second);
  }
}

/// A stream of `device` for frees that wait on other streams, made on first
/// use and kept for the process (PyTorch frees as late as interpreter exit).
cudaStream_t side_stream(int device) {
  static std::array<std::atomic<cudaStream_t>, max_devices> streams{};
  static std::mutex making;
  std::atomic<cudaStream_t>& slot = streams[static_cast<std::size_t>(device)];
  if (cudaStream_t made = slot.load(std::memory_order_acquire)) return made;
  const std::lock_guard lock(making);
  if (cudaStream_t made = slot.load(std::memory_order_acquire)) return made;
  const detail::scoped_device on_device(device);
  cudaStream_t made = nullptr;
  CUDAPMR_CHECK(cudaStreamCreateWithFlags(&made, cudaStreamNonBlocking));
  slot.store(made, std::memory_order_release);
  return made;
}

/// Makes `waiting` wait for the work queued on `stream` so far, with the
/// caches' pooled events; false where CUDA refused.
bool order_after(detail::stream_ordering& ordering, cudaStream_t waiting, cudaStream_t stream) noexcept {
  const detail::ordering_event event = ordering.record(stream);
  if (event == nullptr) return false;
  const bool waited = ordering.make_wait(waiting, event);
  ordering.recycle(event);  // the wait took the event's state: it may be recorded again
  return waited;
}

/// Frees a block that record_stream said other streams use, once their work
/// queued so far is done as well as the freeing stream's: on the device's side
/// stream, which waits for all of them, so that the freeing stream itself
/// waits for nothing. Where a stream involved is (or may be) being captured,
/// the free goes in stream order on `stream` with a note: events there would
/// pull the side stream into the capture, and a device synchronize would end
/// it. Where the order cannot be set up, the device is synchronized first.
/// Never throws.
void free_after_uses(void* pointer, const torch_block& block, cudaStream_t stream) noexcept {
  detail::stream_ordering& ordering = detail::cuda_stream_ordering();
  const bool captured = ordering.is_capturing(stream) ||
                        std::any_of(block.used_on.begin(), block.used_on.end(),
                                    [&](cudaStream_t used) { return ordering.is_capturing(used); });
  if (captured) {
    remember_failure("a block used on other streams (record_stream) was freed while a stream involved is being "
                     "captured: it is freed in order on its own stream only",
                     "");
    return block.resource->deallocate_async(pointer, block.bytes, stream);
  }
  try {
    const cudaStream_t side = side_stream(block.device);
    bool ordered = order_after(ordering, side, stream);
    for (cudaStream_t used : block.used_on) ordered = ordered && order_after(ordering, side, used);
    if (ordered) {
      block.resource->deallocate_async(pointer, block.bytes, side);
      frees_after_other_streams.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    remember_failure("a free after record_stream could not be ordered on the streams: the device is synchronized "
                     "first",
                     "");
  } catch (const std::exception& error) {
    remember_failure("no side stream for a free after record_stream, so the device is synchronized first: ",
                     error.what());
  }
  // No order to build on: once the device is idle, no stream still uses the block.
  if (cudaDeviceSynchronize() != cudaSuccess) static_cast<void>(cudaGetLastError());
  block.resource->deallocate_async(pointer, block.bytes, stream);
}

/// The bridge's view of `device`, or for -1 of every device with a registered
/// resource, blocks or recorded events, as the snapshots the exporter reads:
/// the bridge as the resource (PyTorch's device; the tensors' bytes), the
/// tensors' blocks as the live blocks (oldest first) and the recorded history
/// as the events. One pass over the blocks and one over the history.
std::vector<memory_snapshot> bridge_snapshots(int device) {
  std::array<std::optional<std::size_t>, max_devices> index_of{};  // a device's place in `taken`
  std::vector<memory_snapshot> taken;
  const auto stack_of = [&](int d) -> memory_snapshot* {
    const auto slot = static_cast<std::size_t>(d);
    if (device != -1 && d != device) return nullptr;
    if (!index_of[slot]) {
      index_of[slot] = taken.size();
      memory_snapshot& stack = taken.emplace_back();
      stack.time_ns = history_clock_ns();
      resource_state bridge;
      bridge.name = "cudapmr.torch bridge (PyTorch's tensors)";
      bridge.kind = memory_kind::device;
      bridge.device = d;
      bridge.used_bytes = bytes_in_use[slot].load(std::memory_order_relaxed);
      bridge.peak_used_bytes = peak_bytes[slot].load(std::memory_order_relaxed);
      if (const std::size_t cap = fractions[slot].cap.load(std::memory_order_relaxed);
          cap != std::numeric_limits<std::size_t>::max())
        bridge.cap_bytes = cap;
      stack.resources.push_back(std::move(bridge));
      stack.live_blocks_complete = true;
    }
    return &taken[*index_of[slot]];
  };
  const std::lock_guard lock(blocks_mutex);
  for (int d = 0; d < max_devices; ++d)
    if (d == device || (device == -1 && resource_of(d) != nullptr)) stack_of(d);
  for (const auto& [pointer, block] : blocks) {
    memory_snapshot* stack = stack_of(block.device);
    if (stack == nullptr) continue;
    allocation_record& record = stack->live_blocks.emplace_back();
    record.pointer = pointer;
    record.bytes = block.bytes;
    record.alignment = default_alignment;
    record.stream = stream_ref(block.stream);
    record.sequence = block.sequence;
  }
  for (const device_event& recorded : history.events)
    if (memory_snapshot* stack = stack_of(recorded.device)) stack->events.push_back(recorded.event);
  for (memory_snapshot& stack : taken) {
    std::sort(stack.live_blocks.begin(), stack.live_blocks.end(),
              [](const allocation_record& a, const allocation_record& b) { return a.sequence < b.sequence; });
    stack.events_dropped = history.dropped;
  }
  std::sort(taken.begin(), taken.end(), [](const memory_snapshot& a, const memory_snapshot& b) {
    return a.resources.front().device < b.resources.front().device;
  });
  return taken;
}

}  // namespace

void bind_torch_allocator(nb::module_& module) {
  module.def(
      "_torch_set_resource",
      [](int device, nb::handle resource_object) {
        if (device < 0 || device >= max_devices)
          throw nb::value_error(("device " + std::to_string(device) + " is outside 0.." +
                                 std::to_string(max_devices - 1))
                                    .c_str());
        stream_ordered_resource* resource =
            resource_object.is_none() ? nullptr : &nb::cast<stream_ordered_resource&>(resource_object);
        if (resource != nullptr && resource->device_id() >= 0 && resource->device_id() != device)
          throw nb::value_error((resource->description() + " belongs to device " +
                                 std::to_string(resource->device_id()) + ", not device " + std::to_string(device))
                                    .c_str());
        // PyTorch frees into the resource whenever it drops a tensor, down to the
        // last ones collected while the interpreter shuts down: a registered
        // resource is kept for the life of the process (one reference, never dropped).
        if (resource != nullptr) resource_object.inc_ref();
        torch_resources[static_cast<std::size_t>(device)].store(resource, std::memory_order_release);
      },
      "device_id"_a, "resource"_a.none());
  module.def(
      "_torch_resource",
      [](int device) -> stream_ordered_resource* { return resource_of(device); }, "device_id"_a,
      nb::rv_policy::reference);
  module.def("_torch_last_error", [] {
    const std::lock_guard lock(last_error_mutex);
    return last_error;
  });
  module.def(
      "_torch_reset_peak",
      [](int device) {
        if (!valid_device(device)) throw nb::value_error(("device " + std::to_string(device) + " is out of range").c_str());
        const auto slot = static_cast<std::size_t>(device);
        peak_bytes[slot].store(bytes_in_use[slot].load(std::memory_order_relaxed), std::memory_order_relaxed);
        const std::lock_guard lock(blocks_mutex);
        counts[slot].peak_blocks = counts[slot].blocks;
      },
      "device_id"_a);
  module.def(
      "_torch_reset_accumulated",
      [](int device) {
        if (!valid_device(device)) throw nb::value_error(("device " + std::to_string(device) + " is out of range").c_str());
        const std::lock_guard lock(blocks_mutex);
        device_counts& counted = counts[static_cast<std::size_t>(device)];
        counted.allocations = counted.frees = counted.bytes_allocated = counted.bytes_freed = counted.refusals = 0;
      },
      "device_id"_a);
  module.def(
      "_torch_record_history",
      [](std::int64_t max_entries, bool clear) {
        if (max_entries < 0)
          throw nb::value_error(("max_entries " + std::to_string(max_entries) + " is negative").c_str());
        const std::lock_guard lock(blocks_mutex);
        history.limit = static_cast<std::size_t>(max_entries);
        recording.store(history.limit != 0, std::memory_order_relaxed);
        if (clear || history.limit == 0) {  // off: what was recorded goes, as PyTorch's enabled=None does
          history.events.clear();
          history.dropped = 0;
        }
        while (history.events.size() > history.limit) {
          history.events.pop_front();
          ++history.dropped;
        }
      },
      "max_entries"_a, "clear"_a = false,
      "Records the bridge's allocations, frees and refusals, keeping the last max_entries (0: off, and what "
      "was recorded goes; clear: it goes now, recording or not).");
  module.def(
      "_torch_snapshot",
      [](int device) {
        if (device != -1 && !valid_device(device))
          throw nb::value_error(("device " + std::to_string(device) + " is outside 0.." +
                                 std::to_string(max_devices - 1) + " (or -1 for every device)")
                                    .c_str());
        std::string pickled;
        {
          nb::gil_scoped_release unlocked;  // it waits for the bridge's lock, which allocations hold
          pickled = to_pytorch_pickle(bridge_snapshots(device));
        }
        return nb::bytes(pickled.data(), pickled.size());
      },
      "device_id"_a,
      "The bridge's blocks and history as PyTorch's memory snapshot pickle (torch.cuda.memory._snapshot()'s "
      "format): one device's, or every device's that has a registered resource, blocks or events (-1).");
  module.def(
      "_torch_bridge_state",
      [](int device) {
        if (!valid_device(device))
          throw nb::value_error(("device " + std::to_string(device) + " is outside 0.." +
                                 std::to_string(max_devices - 1))
                                    .c_str());
        const auto slot = static_cast<std::size_t>(device);
        std::size_t blocks_with_other_streams = 0;
        device_counts counted;
        {
          const std::lock_guard lock(blocks_mutex);
          for (const auto& [pointer, block] : blocks)
            if (block.device == device && !block.used_on.empty()) ++blocks_with_other_streams;
          counted = counts[slot];
        }
        nb::dict state;
        state["bytes"] = bytes_in_use[slot].load(std::memory_order_relaxed);
        state["peak_bytes"] = peak_bytes[slot].load(std::memory_order_relaxed);
        state["blocks"] = counted.blocks;
        state["blocks_used_on_other_streams"] = blocks_with_other_streams;
        state["memory_fraction"] = fractions[slot].fraction.load(std::memory_order_relaxed);
        const std::size_t cap = fractions[slot].cap.load(std::memory_order_relaxed);
        state["cap_bytes"] = cap == std::numeric_limits<std::size_t>::max() ? nb::none() : nb::cast(cap);
        state["refused_allocations"] = counted.refusals;
        state["peak_blocks"] = counted.peak_blocks;
        state["allocations"] = counted.allocations;
        state["frees"] = counted.frees;
        state["bytes_allocated"] = counted.bytes_allocated;
        state["bytes_freed"] = counted.bytes_freed;
        state["frees_after_other_streams"] = frees_after_other_streams.load(std::memory_order_relaxed);
        state["empty_cache_calls"] = empty_cache_calls.load(std::memory_order_relaxed);
        state["current_allocator"] = is_current_allocator.load(std::memory_order_relaxed);
        return state;
      },
      "device_id"_a);
}

}  // namespace cudapmr::python

/// Allocates `bytes` on `device` in stream order on `stream` from the
/// registered resource. A refusal leaves its message on stderr and in
/// last_error. In a MemPool it returns null: PyTorch then frees the pool's
/// cached blocks, retries and raises itself. As PyTorch's current allocator,
/// which takes a null for a block, it throws: torch.OutOfMemoryError
/// (c10::OutOfMemoryError) where memory ran out (the resource's out_of_memory,
/// the memory fraction PyTorch set), RuntimeError for anything else (no
/// resource registered, a CUDA error).
extern "C" __attribute__((visibility("default"))) void* cudapmr_torch_malloc(std::size_t bytes, int device,
                                                                              cudaStream_t stream) {
  namespace bridge = cudapmr::python;
  cudapmr::stream_ordered_resource* resource = bridge::resource_of(device);
  bool out_of_memory = false;
  std::string reason;
  const auto keep = [&reason](const char* what) noexcept {
    bridge::remember_failure(what, "");
    try {
      reason = what;
    } catch (...) {  // no memory for the copy: the message is on stderr and in last_error
    }
  };
  try {
    if (resource == nullptr)
      throw std::invalid_argument("no cudapmr resource is registered for device " + std::to_string(device) +
                                  " (cudapmr.torch.allocator(resource) registers one)");
    const auto slot = static_cast<std::size_t>(device);
    const std::size_t cap = bridge::fractions[slot].cap.load(std::memory_order_relaxed);
    const std::size_t held = bridge::bytes_in_use[slot].fetch_add(bytes, std::memory_order_relaxed);
    if (held > cap || bytes > cap - held) {
      bridge::bytes_in_use[slot].fetch_sub(bytes, std::memory_order_relaxed);
      throw cudapmr::out_of_memory(bytes, cudapmr::default_alignment, resource->description(),
                                   "it would pass the memory fraction " +
                                       std::to_string(bridge::fractions[slot].fraction.load(std::memory_order_relaxed)) +
                                       " PyTorch set for device " + std::to_string(device) + " (" +
                                       std::to_string(cap) + " bytes; " + std::to_string(held) + " held)");
    }
    void* pointer = nullptr;
    try {
      pointer = resource->allocate_async(bytes, stream);
      if (pointer != nullptr) {
        const std::lock_guard lock(bridge::blocks_mutex);
        const bool inserted =
            bridge::blocks
                .emplace(pointer, bridge::torch_block{resource, bytes, device, stream, {}, bridge::blocks_handed_out + 1})
                .second;
        if (!inserted) {  // a block the resource handed out twice: counted once, freed once
          bridge::bytes_in_use[slot].fetch_sub(bytes, std::memory_order_relaxed);
          return pointer;
        }
        ++bridge::blocks_handed_out;
        bridge::raise_peak(slot, held + bytes);
        bridge::device_counts& counted = bridge::counts[slot];
        counted.peak_blocks = std::max(counted.peak_blocks, ++counted.blocks);
        ++counted.allocations;
        counted.bytes_allocated += bytes;
        bridge::record_event(device, cudapmr::history_action::allocate, pointer, bytes, stream);
      }
    } catch (...) {
      if (pointer != nullptr) resource->deallocate_async(pointer, bytes, stream);  // its record could not be made
      bridge::bytes_in_use[slot].fetch_sub(bytes, std::memory_order_relaxed);
      throw;
    }
    return pointer;
  } catch (const std::bad_alloc& error) {  // cudapmr::out_of_memory among them
    out_of_memory = true;
    if (bridge::valid_device(device)) {
      const std::optional<std::size_t> free_bytes = bridge::recording.load(std::memory_order_relaxed)
                                                        ? cudapmr::device::free_memory_if_known(device)
                                                        : std::nullopt;
      const std::lock_guard lock(bridge::blocks_mutex);
      ++bridge::counts[static_cast<std::size_t>(device)].refusals;
      bridge::record_event(device, cudapmr::history_action::out_of_memory, nullptr, bytes, stream, free_bytes);
    }
    keep(error.what());
  } catch (const std::exception& error) {
    keep(error.what());
  } catch (...) {
    keep("an unknown error");
  }
  if (!bridge::is_current_allocator.load(std::memory_order_relaxed)) return nullptr;
  // Outside the handlers, in PyTorch's words first.
  const std::string what = "Tried to allocate " + std::to_string(bytes) + " bytes on device " +
                           std::to_string(device) + " from cudapmr: " + reason;
  if (out_of_memory) bridge::throw_torch_out_of_memory("CUDA out of memory. " + what);
  throw std::runtime_error("cudapmr could not allocate. " + what);
}

/// PyTorch's init hook: called on the current allocator only, at PyTorch's
/// CUDA lazy init, with the number of devices (0 at the allocator's construction).
extern "C" __attribute__((visibility("default"))) void cudapmr_torch_init(int device_count) {
  if (device_count > 0) cudapmr::python::is_current_allocator.store(true, std::memory_order_relaxed);
}

/// Frees in stream order on `stream`, into the resource that allocated it,
/// what cudapmr_torch_malloc gave, after the work of every stream
/// record_stream named; another pointer is left alone, with a message on
/// stderr. Never throws.
extern "C" __attribute__((visibility("default"))) void cudapmr_torch_free(void* pointer, std::size_t bytes,
                                                                           int device, cudaStream_t stream) {
  namespace bridge = cudapmr::python;
  if (pointer == nullptr) return;
  bridge::torch_block block;
  bool found = false;
  {
    const std::lock_guard lock(bridge::blocks_mutex);
    if (auto entry = bridge::blocks.find(pointer); entry != bridge::blocks.end()) {
      block = std::move(entry->second);
      bridge::blocks.erase(entry);
      found = true;
      bridge::device_counts& counted = bridge::counts[static_cast<std::size_t>(block.device)];
      --counted.blocks;
      ++counted.frees;
      counted.bytes_freed += block.bytes;
      bridge::record_event(block.device, cudapmr::history_action::free, pointer, block.bytes, stream);
    }
  }
  if (!found) {
    try {
      bridge::remember_failure("cudapmr_torch_free: " + std::to_string(bytes) + " bytes at " +
                               std::to_string(reinterpret_cast<std::uintptr_t>(pointer)) + " on device " +
                               std::to_string(device) + " were not allocated by cudapmr_torch_malloc; not freed");
    } catch (...) {  // no memory for the message: the pointer is still left alone
    }
    return;
  }
  bridge::bytes_in_use[static_cast<std::size_t>(block.device)].fetch_sub(block.bytes, std::memory_order_relaxed);
  // PyTorch frees with no device guard, and its default stream is handle 0: the current device's. With
  // another device current, the free would follow that device's work, not the work that used the block.
  std::optional<cudapmr::detail::scoped_device> on_device;
  try {
    on_device.emplace(block.device);
  } catch (...) {  // the free still goes, on the stream as CUDA reads it
  }
  if (block.used_on.empty()) return block.resource->deallocate_async(pointer, block.bytes, stream);
  bridge::free_after_uses(pointer, block, stream);
}

/// PyTorch's record_stream hook: the block at `pointer` is used on `stream`
/// too, so its free waits for the work queued there up to the free. The
/// stream it was allocated on, a repeated stream and a pointer not handed out
/// here are ignored. Never throws.
extern "C" __attribute__((visibility("default"))) void cudapmr_torch_record_stream(void* pointer,
                                                                                    cudaStream_t stream) {
  namespace bridge = cudapmr::python;
  try {
    const std::lock_guard lock(bridge::blocks_mutex);
    const auto entry = bridge::blocks.find(pointer);
    if (entry == bridge::blocks.end() || entry->second.stream == stream) return;
    std::vector<cudaStream_t>& used_on = entry->second.used_on;
    if (std::find(used_on.begin(), used_on.end(), stream) == used_on.end()) used_on.push_back(stream);
  } catch (const std::exception& error) {
    bridge::remember_failure("record_stream could not be recorded: ", error.what());
  }
}

/// PyTorch's empty_cache hook: every registered resource gives back what it
/// holds unused (`trim`, down its stack) after the device's work is done.
/// Never throws; a failure is in last_error.
extern "C" __attribute__((visibility("default"))) void cudapmr_torch_empty_cache() {
  namespace bridge = cudapmr::python;
  bridge::empty_cache_calls.fetch_add(1, std::memory_order_relaxed);
  std::vector<cudapmr::stream_ordered_resource*> trimmed;
  for (int device = 0; device < bridge::max_devices; ++device) {
    cudapmr::stream_ordered_resource* resource = bridge::resource_of(device);
    if (resource == nullptr || std::find(trimmed.begin(), trimmed.end(), resource) != trimmed.end()) continue;
    try {
      trimmed.push_back(resource);
      const cudapmr::detail::scoped_device on_device(device);
      CUDAPMR_CHECK(cudaDeviceSynchronize());  // frees on any of PyTorch's streams must land first
      resource->trim(cudapmr::stream_ref(cudaStreamLegacy));
    } catch (const std::exception& error) {
      bridge::remember_failure("empty_cache could not trim a resource: ", error.what());
    }
  }
}

/// PyTorch's memory fraction hook: the blocks of `device` may hold at most
/// `fraction` of its memory; later allocations past it are refused. Never
/// throws; a failure (a bad device or fraction) is in last_error.
extern "C" __attribute__((visibility("default"))) void cudapmr_torch_set_memory_fraction(double fraction,
                                                                                          int device) {
  namespace bridge = cudapmr::python;
  try {
    if (!bridge::valid_device(device) || !(fraction >= 0.0 && fraction <= 1.0))
      throw std::invalid_argument("memory fraction " + std::to_string(fraction) + " for device " +
                                  std::to_string(device) + ": need a fraction in [0, 1] and a device in 0.." +
                                  std::to_string(bridge::max_devices - 1));
    const cudapmr::detail::scoped_device on_device(device);
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    CUDAPMR_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const auto slot = static_cast<std::size_t>(device);
    bridge::fractions[slot].fraction.store(fraction, std::memory_order_relaxed);
    bridge::fractions[slot].cap.store(static_cast<std::size_t>(fraction * static_cast<double>(total_bytes)),
                                  std::memory_order_relaxed);
  } catch (const std::exception& error) {
    bridge::remember_failure("set_per_process_memory_fraction: ", error.what());
  }
}
