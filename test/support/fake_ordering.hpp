// SPDX-License-Identifier: Apache-2.0
#pragma once
// A stand-in for CUDA's part in the caches' stream ordering, for host tests:
// events the test completes by hand, recorded waits, captured streams, a
// synchronize that fails, and a count of every wait of the host it sees.

#include <cudapmr/detail/stream_ordering.hpp>
#include <cudapmr/error.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <utility>
#include <vector>

namespace cudapmr::test {

/// A made-up stream handle: the host resource ignores streams, the caches key on them.
inline cudaStream_t fake_stream(std::uintptr_t id) { return reinterpret_cast<cudaStream_t>(id * 0x1000); }

/// Plays CUDA's part: events the test completes by hand, recorded waits,
/// captured streams and the current device.
class fake_ordering final : public detail::stream_ordering {
 public:
  struct event {
    cudaStream_t stream;
    bool completed = false;
  };
  detail::ordering_event record(stream_ref stream) noexcept override {
    if (during_record) std::exchange(during_record, {})();
    if (captured.contains(stream.get())) return nullptr;
    try {
      events.push_back(std::make_unique<event>(event{stream.get()}));
    } catch (...) {  // no memory for it: as CUDA's record failing
      return nullptr;
    }
    return events.back().get();
  }
  bool has_completed(detail::ordering_event e) noexcept override {
    ++queries;
    return static_cast<event*>(e)->completed;
  }
  bool wait(detail::ordering_event e) noexcept override {
    ++event_synchronizations;
    static_cast<event*>(e)->completed = true;
    return true;
  }
  bool make_wait(stream_ref stream, detail::ordering_event e) noexcept override {
    waits.emplace_back(stream.get(), static_cast<event*>(e)->stream);
    return true;
  }
  void recycle(detail::ordering_event) noexcept override { ++recycled; }
  bool is_capturing(stream_ref stream) noexcept override { return captured.contains(stream.get()); }
  int current_device() noexcept override { return device; }
  void synchronize_all_devices() override {
    ++device_synchronizations;
    if (during_synchronize) std::exchange(during_synchronize, {})();
    if (synchronize_fails) throw cuda_error(cudaErrorLaunchFailure, "cudaDeviceSynchronize (fake_ordering)");
    complete_all();
  }
  void complete_all() {
    for (const auto& each : events) each->completed = true;
  }

  std::vector<std::unique_ptr<event>> events;
  std::vector<std::pair<cudaStream_t, cudaStream_t>> waits;  // (waiting stream, stream of the event)
  std::set<cudaStream_t> captured;
  std::size_t recycled = 0;
  std::size_t queries = 0;  // of has_completed
  int device = 0;
  int device_synchronizations = 0;
  int event_synchronizations = 0;  // calls of wait: the host blocked on one event
  /// Every wait of the host seen: for every device, or for one event.
  [[nodiscard]] int synchronizations() const noexcept { return device_synchronizations + event_synchronizations; }
  bool synchronize_fails = false;  // as after a kernel's fault
  /// Run once inside the next synchronize: what another thread does while one waits.
  std::function<void()> during_synchronize;
  /// Run once inside the next record: what another thread does while a free seals its stream's blocks.
  std::function<void()> during_record;
};

}  // namespace cudapmr::test
