// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file device_stack.hpp
/// The default stack for device memory: a per-stream cache of small blocks
/// over a best-fit coalescing engine over the virtual-memory leaf.

#include "cudapmr/adaptors/caching_resource.hpp"
#include "cudapmr/adaptors/coalescing_resource.hpp"
#include "cudapmr/stream_ordered_resource.hpp"
#include "cudapmr/virtual_memory_resource.hpp"

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>

namespace cudapmr {

/// The parts of a device_stack.
struct device_stack_options {
  /// The front: blocks up to `max_cached_block` are reused per stream with no
  /// lock shared between streams; larger requests go straight to the engine.
  /// It keeps at most four times what is live: what it hands back, the engine
  /// merges. A larger request first hands the engine the blocks its stream
  /// freed, so blocks of sizes no longer asked for do not sit beside a growing working set.
  caching_options front{.max_cached_block = std::size_t{4} << 20,
                        .max_cached_bytes = std::nullopt,
                        .check_capture = true,
                        .shrink_interval = std::chrono::milliseconds{200},
                        .max_cached_per_live = 4.0,
                        .hand_back_before_large = true,
                        .stream_share = std::nullopt};
  /// The engine: best fit in segments taken from the leaf, split and merged;
  /// large requests share segments of up to 20 MiB once much is in use;
  /// wholly free segments past 64 MiB, or past half the most lately in use,
  /// go back to the leaf at the free that empties them.
  coalescing_options engine{.shared_large_segment = std::size_t{20} << 20, .max_idle_bytes = std::size_t{64} << 20};
  /// The leaf: physical memory mapped into one reserved address range. Not
  /// exportable: the stack hands out blocks carved from the leaf's allocations,
  /// which no handle can export, and a leaf that exports nothing lets a new
  /// segment take over the pages of one freed on its stream (a growing working
  /// set then holds its pages once).
  virtual_memory_options leaf{.exportable = false};
  /// Once the engine has served no allocation or free for this long, a thread
  /// of the stack hands its idle segments past `engine.max_idle_bytes` back to
  /// the leaf, which unmaps them once the work before their frees is done: a
  /// program that pauses leaves the device to others. Zero: no such thread.
  std::chrono::milliseconds idle_release{250};
};

/// Device memory of one GPU through three layers that each do one thing:
/// `caching_resource` (small blocks, per stream, at a few tens of ns) over
/// `coalescing_resource` (best fit, so memory of one size serves requests of
/// any other) over `virtual_memory_resource` (pages mapped as segments are
/// made and unmapped once the work before their free is done, with no
/// device-wide synchronize). The front gives blocks back to the engine, and
/// the engine segments to the leaf, in stream order and without a CUDA
/// call beyond events, so what the device holds follows what is live.
/// Allocations during stream capture go to the engine's and the leaf's
/// capture paths (the leaf maps memory that the graph keeps).
///
/// What the device holds follows what is live four ways: the front keeps at
/// most four times what is live, and hands a stream's freed blocks to the
/// engine before that stream's next request past 4 MiB; the engine gives
/// wholly free segments back past half its recent peak; and after
/// `idle_release` without work in the engine a thread of the stack gives back
/// the rest (all but 64 MiB), with events and never a device-wide synchronize.
///
/// `state()` and `snapshot()` show each layer (`upstream()` walks them);
/// `trim(stream)` empties the front and the engine and unmaps what the leaf
/// holds freed. Thread-safe. Equal only to itself.
class device_stack final : public stream_ordered_resource {
 public:
  /// \throws std::invalid_argument for a bad ordinal or option (a negative
  ///   `idle_release` before any CUDA call); cuda_error
  ///   where no device exists or it lacks virtual memory management.
  explicit device_stack(int device, device_stack_options options = {});
  /// Stops the idle thread, then hands everything back, front first. Never throws.
  ~device_stack() override;
  device_stack(const device_stack&) = delete;
  device_stack& operator=(const device_stack&) = delete;

  /// Hands back what the front and the engine hold, then frees in the leaf
  /// the memory of graphs captured over the stack and every freed range,
  /// after synchronizing the device: call it once no such graph will replay.
  /// \throws cuda_error if a synchronize fails.
  void release();

  [[nodiscard]] caching_resource& front() noexcept { return front_; }
  [[nodiscard]] coalescing_resource& engine() noexcept { return engine_; }
  [[nodiscard]] virtual_memory_resource& leaf() noexcept { return leaf_; }
  [[nodiscard]] std::string description() const override;

 private:
  [[nodiscard]] stream_ref do_bound_stream() const noexcept override { return own_bound_stream(front_); }
  [[nodiscard]] const stream_ordered_resource& do_bound_stream_owner() const noexcept override {
    return bound_stream_owner(front_);
  }
  [[nodiscard]] const stream_ordered_resource* do_upstream() const noexcept override { return &front_; }
  void* do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) override {
    return front_.allocate_async(bytes, alignment, stream);
  }
  void do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept override {
    front_.deallocate_async(p, bytes, alignment, stream);
  }
  // The front's own pmr path: ready blocks with no synchronize.
  void* do_allocate(std::size_t bytes, std::size_t alignment) override { return front_.allocate(bytes, alignment); }
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override {
    front_.deallocate(p, bytes, alignment);
  }
  void do_trim(stream_ref stream) override { front_.trim(stream); }
  /// The stack as one resource: what users hold, as the front counts it
  /// (whole size classes; bytes as asked where it passed a request on
  /// uncached), what the leaf has mapped, and what the layers hold free.
  void do_report(resource_state& state) const override;

  /// The idle thread's loop: every `idle_release`, if the engine saw no work
  /// since the last look, its idle segments go back and the leaf unmaps what is done.
  void give_back_while_idle(std::stop_token stop, std::chrono::milliseconds interval) noexcept;
  /// Stops the idle thread and waits for it; at exit too (a stack never destroyed).
  void stop_idle_thread() noexcept;
  /// At exit: the front's blocks that need no wait (`release_without_waiting`)
  /// and the engine's idle segments back to the leaf, which unmaps them as
  /// the work before their frees completes, within some 100 ms; no wait on
  /// the host beyond that, graphs' memory left mapped, and nothing after a
  /// device reset. A leak checker (compute-sanitizer's memcheck) then finds
  /// no mapping of the memory a finished program left idle.
  void give_back_at_exit() noexcept;

  // Declared leaf first: destroyed front first.
  virtual_memory_resource leaf_;
  coalescing_resource engine_;
  caching_resource front_;
  std::mutex idle_mutex_;
  std::condition_variable_any idle_wake_;
  std::jthread idle_thread_;  // last: stopped before the layers go
};

/// The process's device_stack of `device` (-1, the default: the current device), made
/// on first use and never destroyed, so that a free during exit still finds
/// it. At exit, before CUDA's teardown, it gives back what it holds idle,
/// waiting some 100 ms at most for work queued before its last frees and never
/// synchronizing the device; what is live, graphs' memory and what is still
/// busy the driver takes back when the process ends.
/// \throws std::invalid_argument for an ordinal below -1 or past the last
/// device; as device_stack's constructor.
[[nodiscard]] device_stack& default_device_stack(int device = -1);

}  // namespace cudapmr
