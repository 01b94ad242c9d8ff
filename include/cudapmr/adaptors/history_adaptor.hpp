// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file history_adaptor.hpp
/// A bounded history of allocation events (allocate, free, free completed,
/// out of memory) in a lock-free ring, and named regions to annotate it.

#include "cudapmr/adaptors/resource_adaptor.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cudapmr {

/// What a history event records.
enum class history_action : std::uint8_t {
  allocate,        ///< an allocation succeeded
  free,            ///< a free was ordered on its stream
  free_completed,  ///< the memory went back to the upstream (pageable memory: at once)
  out_of_memory,   ///< an allocation was refused; its pointer is null
};

/// "allocate", "free", "free_completed" or "out_of_memory".
[[nodiscard]] std::string_view to_string(history_action action) noexcept;

/// The clock of every time in a history and a snapshot:
/// `std::chrono::steady_clock`, in nanoseconds since its epoch.
[[nodiscard]] inline std::uint64_t history_clock_ns() noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

/// One event of a history_adaptor.
struct history_event {
  history_action action = history_action::allocate;
  /// Its place among all the adaptor's events, from 1.
  std::uint64_t sequence = 0;
  /// `std::chrono::steady_clock` time, in nanoseconds since its epoch.
  std::uint64_t time_ns = 0;
  /// `detail::thread_ordinal()` of the calling thread.
  std::uint64_t thread = 0;
  void* pointer = nullptr;
  std::size_t bytes = 0;
  std::size_t alignment = 0;
  stream_ref stream{cudaStream_t{}};
  /// Return addresses, innermost first; empty unless call stacks are captured.
  std::vector<void*> call_stack;
  /// Out-of-memory events of device or managed memory: the device's free
  /// memory when the refusal came, where CUDA could say.
  std::optional<std::size_t> device_free_bytes;
};

/// Where a named region starts or ends.
enum class annotation_stage : std::uint8_t { begin, end };

/// "begin" or "end".
[[nodiscard]] constexpr std::string_view to_string(annotation_stage stage) noexcept {
  return stage == annotation_stage::begin ? "begin" : "end";
}

/// A user's mark in the history, like `torch.cuda.memory`'s annotations.
struct history_annotation {
  std::string name;
  annotation_stage stage = annotation_stage::begin;
  /// Same clock as `history_event::time_ns`.
  std::uint64_t time_ns = 0;
  std::uint64_t thread = 0;
};

/// Options of a history_adaptor.
struct history_options {
  /// The largest `capacity`: a ring of 2^32 events (256 GiB of slots) is past any machine's memory to spare.
  static constexpr std::size_t max_capacity = std::size_t{1} << 32;
  /// The largest `call_stack_depth`, deeper than the stacks of real programs.
  static constexpr std::size_t max_call_stack_depth = 256;

  /// How many of the latest events are kept (rounded up to a power of two, at
  /// least 2; at most `max_capacity`).
  std::size_t capacity = std::size_t{1} << 16;
  /// Record each allocation's call stack (glibc `backtrace`, some microseconds each).
  bool capture_call_stacks = false;
  /// The most frames kept per call stack (at most `max_call_stack_depth`).
  std::size_t call_stack_depth = 16;
  /// How many annotations are kept (the oldest go first).
  std::size_t annotation_capacity = 4096;
  /// How many refusals get a report (each one reads the whole history and
  /// the stack); later ones are recorded and passed on as they came.
  std::size_t explained_refusals = std::numeric_limits<std::size_t>::max();
};

/// Records what passes through it to an upstream in a bounded ring of the
/// latest events: time, thread, pointer, bytes, alignment, stream and,
/// optionally, the call stack. Recording takes no lock: one atomic increment
/// claims a slot, a few relaxed stores fill it, and a sequence stamp
/// publishes it, so readers (`events()`, snapshots) never stop writers. An
/// out_of_memory from the upstream is recorded, then rethrown carrying a
/// report of the stack below (see `memory_snapshot.hpp`). Thread-safe.
class history_adaptor final : public resource_adaptor {
 public:
  /// Records what passes through to `upstream`, which must outlive the adaptor.
  /// \throws std::invalid_argument naming the option and its value where `capacity`
  /// or `call_stack_depth` is past its limit; std::bad_alloc for the ring only.
  explicit history_adaptor(stream_ordered_resource& upstream, history_options options = {});
  ~history_adaptor() override;

  /// The events still in the ring, oldest first. An event whose slot is being
  /// rewritten while it is read is left out.
  [[nodiscard]] std::vector<history_event> events() const;
  /// Every event ever recorded, kept or not.
  [[nodiscard]] std::uint64_t recorded() const noexcept { return next_ticket_.load(std::memory_order_acquire); }
  /// Events that no longer fit in the ring.
  [[nodiscard]] std::uint64_t dropped() const noexcept;
  /// The ring's size in events.
  [[nodiscard]] std::size_t capacity() const noexcept { return mask_ + 1; }
  [[nodiscard]] const history_options& options() const noexcept { return options_; }

  /// Marks the start of a region named `name` (takes a lock: for phases, not per allocation).
  void annotate_begin(std::string_view name);
  /// Marks the end of the region named `name`.
  void annotate_end(std::string_view name);
  /// The annotations kept, oldest first.
  [[nodiscard]] std::vector<history_annotation> annotations() const;

  [[nodiscard]] std::string description() const override { return describe_as("history_adaptor"); }

 private:
  struct slot;

  void* do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) override;
  void do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept override;
  /// `device_free` is kept for out_of_memory events only (in the slot of the pointer, which they lack).
  void record(history_action action, void* p, std::size_t bytes, std::size_t alignment, stream_ref stream,
              const std::vector<void*>* call_stack, std::uint64_t device_free = unknown_device_free) noexcept;
  static constexpr std::uint64_t unknown_device_free = std::numeric_limits<std::uint64_t>::max();
  /// The device's free memory, for an out_of_memory event; unknown for host kinds or where CUDA cannot say.
  [[nodiscard]] std::uint64_t device_free_now() const noexcept;
  void annotate(std::string_view name, annotation_stage stage);

  history_options options_;
  std::size_t mask_;
  std::size_t frames_per_slot_;
  std::unique_ptr<slot[]> slots_;
  /// `capacity * frames_per_slot_` return addresses; empty without call stacks.
  std::unique_ptr<std::atomic<void*>[]> frames_;
  alignas(64) std::atomic<std::uint64_t> next_ticket_{0};
  std::atomic<std::size_t> explained_{0};
  mutable std::mutex annotations_mutex_;
  std::deque<history_annotation> annotations_;  // the oldest leaves first once at capacity
};

/// Annotates a history_adaptor for the life of a scope.
class scoped_annotation {
 public:
  /// Marks the start of region `name` in `history`, which must outlive this.
  scoped_annotation(history_adaptor& history, std::string name) : history_(history), name_(std::move(name)) {
    history_.annotate_begin(name_);
  }
  /// Marks its end; never throws (an end that cannot be recorded is left out).
  ~scoped_annotation() {
    try {
      history_.annotate_end(name_);
    } catch (...) {
    }
  }
  scoped_annotation(const scoped_annotation&) = delete;
  scoped_annotation& operator=(const scoped_annotation&) = delete;

 private:
  history_adaptor& history_;
  std::string name_;
};

}  // namespace cudapmr
