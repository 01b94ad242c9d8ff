// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/device_stack.hpp"

#include "cudapmr/detail/cuda_check.hpp"
#include "cudapmr/detail/per_device.hpp"
#include "cudapmr/detail/relaxed_capture_scope.hpp"
#include "cudapmr/error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <mutex>
#include <utility>
#include <vector>

namespace cudapmr {
namespace {

/// The stacks whose idle thread runs. At exit their threads stop before
/// CUDA's teardown (registered earlier, at CUDA's first call, so run later):
/// a stack never destroyed, such as `default_device_stack`'s, must not call
/// the driver while it goes away.
struct idle_threads {
  std::mutex mutex;
  std::vector<device_stack*> running;
};

idle_threads& registry() {
  static auto* const threads = new idle_threads;  // never destroyed: used at exit
  return *threads;
}

const device_stack_options& validated(const device_stack_options& options) {
  if (options.idle_release.count() < 0)
    throw std::invalid_argument(
        fmt::format("device_stack_options::idle_release of {} ms is negative", options.idle_release.count()));
  return options;
}

}  // namespace

device_stack::device_stack(int device, device_stack_options options)
    : stream_ordered_resource(memory_kind::device, device),
      leaf_(device, validated(options).leaf),  // before any CUDA call
      engine_(leaf_, options.engine),
      front_(engine_, options.front) {
  if (options.idle_release.count() == 0) return;
  static std::once_flag at_exit;
  std::call_once(at_exit, [] {
    std::atexit([] {
      const std::lock_guard lock(registry().mutex);
      for (device_stack* stack : registry().running) stack->stop_idle_thread();
    });
  });
  {
    const std::lock_guard lock(registry().mutex);
    registry().running.push_back(this);
  }
  const auto interval = std::min<std::chrono::milliseconds>(options.idle_release, std::chrono::hours(24));
  idle_thread_ = std::jthread([this, interval](std::stop_token stop) { give_back_while_idle(std::move(stop), interval); });
}

device_stack::~device_stack() {
  {
    const std::lock_guard lock(registry().mutex);
    std::erase(registry().running, this);
  }
  stop_idle_thread();
}

void device_stack::stop_idle_thread() noexcept {
  if (!idle_thread_.joinable()) return;
  idle_thread_.request_stop();
  idle_wake_.notify_all();
  idle_thread_.join();
}

void device_stack::give_back_while_idle(std::stop_token stop, std::chrono::milliseconds interval) {
  // Its event queries and unmaps concern no capture: relaxed, they neither
  // fail nor break one that another thread makes meanwhile.
  const detail::relaxed_capture_scope relaxed;
  if (cudaSetDevice(device_id()) != cudaSuccess) return;  // events for the leaf's frees belong to its device
  std::pair<std::uint64_t, std::size_t> last_seen{~std::uint64_t{0}, 0};
  std::unique_lock lock(idle_mutex_);
  while (!idle_wake_.wait_for(lock, stop, interval, [] { return false; }) && !stop.stop_requested()) {
    const coalescing_statistics engine = engine_.statistics();
    const std::pair<std::uint64_t, std::size_t> seen{engine.blocks_handed_out, engine.used_bytes};
    if (std::exchange(last_seen, seen) != seen) continue;  // work since the last look
    if (engine_.release_idle() == 0 && leaf_.pending_bytes() == 0) continue;
    try {
      leaf_.release_completed();
    } catch (...) {  // a failed wait: those ranges stay pending for the next look
    }
  }
}

void device_stack::do_report(resource_state& state) const {
  const resource_state front = front_.state();
  const resource_state engine = engine_.state();
  const resource_state leaf = leaf_.state();
  const std::size_t front_cached = front.cached_bytes.value_or(0);
  // The front's cached blocks are out of the engine: in use there, free here.
  if (engine.used_bytes) state.used_bytes = *engine.used_bytes - std::min(front_cached, *engine.used_bytes);
  state.reserved_bytes = leaf.reserved_bytes;
  state.peak_reserved_bytes = leaf.peak_reserved_bytes;
  state.cached_bytes = front_cached + engine.cached_bytes.value_or(0);
  state.largest_free_block = engine.largest_free_block;
  state.releasable_bytes = front_cached + engine.releasable_bytes.value_or(0) + leaf.releasable_bytes.value_or(0);
}

void device_stack::release() {
  front_.release();
  engine_.release();
  leaf_.release();
}

std::string device_stack::description() const { return fmt::format("device_stack (device {})", device_id()); }

device_stack& default_device_stack(int device) {
  if (device < 0) CUDAPMR_CHECK(cudaGetDevice(&device));
  return detail::per_device_instance<device_stack>(device);
}

}  // namespace cudapmr
