// SPDX-License-Identifier: Apache-2.0
#pragma once
// The CUDA calls a cache makes to move freed blocks between streams: events
// recorded at a free, waits, capture and device queries. Behind an interface
// so that pageable memory needs none of them and host tests can play CUDA.

#include "cudapmr/memory_kind.hpp"
#include "cudapmr/stream.hpp"

namespace cudapmr::detail {

/// An event a cache recorded; opaque to the cache (a `cudaEvent_t` for CUDA).
using ordering_event = void*;

/// What a cache asks of CUDA. Every call but `synchronize_all_devices` is
/// noexcept: a cache that cannot order a block simply keeps it where it is.
class stream_ordering {
 public:
  virtual ~stream_ordering() = default;

  /// An event recorded on `stream` after the work queued so far, or null when
  /// none can be recorded (the stream is being captured, or CUDA refused).
  [[nodiscard]] virtual ordering_event record(stream_ref stream) noexcept = 0;
  /// Whether all the work before `event` has completed.
  [[nodiscard]] virtual bool has_completed(ordering_event event) noexcept = 0;
  /// Blocks the calling thread until the work before `event` has completed
  /// (a wait for that one event, not for the device); false if CUDA refused.
  [[nodiscard]] virtual bool wait(ordering_event event) noexcept = 0;
  /// Orders the work queued on `stream` from now on after `event`; false if CUDA refused.
  [[nodiscard]] virtual bool make_wait(stream_ref stream, ordering_event event) noexcept = 0;
  /// Hands an event back once no block refers to it.
  virtual void recycle(ordering_event event) noexcept = 0;
  /// Whether `stream` is being captured into a graph, where a cached block must
  /// not appear: the graph may replay after the block has another owner.
  [[nodiscard]] virtual bool is_capturing(stream_ref stream) noexcept = 0;
  /// The current device: the default-stream handles (0, legacy, per-thread)
  /// name one stream per device.
  [[nodiscard]] virtual int current_device() noexcept = 0;
  /// Waits until all work on every device has completed: the last resort for
  /// blocks freed on streams that may since have been destroyed.
  /// \throws cuda_error.
  virtual void synchronize_all_devices() = 0;
};

/// CUDA's, for device, pinned and managed memory. Process-wide, never destroyed.
[[nodiscard]] stream_ordering& cuda_stream_ordering() noexcept;
/// For pageable memory, which no stream work touches: every event has
/// completed, nothing is captured. Process-wide, never destroyed.
[[nodiscard]] stream_ordering& host_stream_ordering() noexcept;
/// The ordering of a kind of memory: the host's for pageable memory, CUDA's for the rest.
[[nodiscard]] stream_ordering& stream_ordering_for(memory_kind kind) noexcept;

}  // namespace cudapmr::detail
