// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/device_stack.hpp"

#include "cudapmr/detail/cuda_check.hpp"
#include "cudapmr/detail/per_device.hpp"
#include "cudapmr/detail/relaxed_capture_scope.hpp"
#include "cudapmr/detail/synchronize.hpp"
#include "cudapmr/device.hpp"
#include "cudapmr/error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

namespace cudapmr {
namespace {

/// The stacks whose idle thread runs. At exit, before CUDA's teardown, their
/// threads stop and they give back what they hold idle: a stack never
/// destroyed, such as `default_device_stack`'s, must not call the driver
/// while it goes away. (This assumes, as the CUDA runtime does today, that it
/// registers its teardown at its first call, before any stack exists, so that
/// it runs after this.) A forked child has none of its parent's threads: it
/// leaves them alone.
struct idle_threads {
  std::mutex mutex;
  std::vector<device_stack*> running;
  std::atomic<pid_t> process = 0;  // whose threads `running` are; read before the lock, which a fork may have left held
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
      if (registry().process.load() != ::getpid()) return;  // a forked child: not its threads
      const std::lock_guard lock(registry().mutex);  // a stack destroyed meanwhile waits, then finds itself gone
      for (device_stack* stack : registry().running) {
        stack->stop_idle_thread();
        stack->give_back_at_exit();
      }
      registry().running.clear();
    });
  });
  const auto interval = std::min<std::chrono::milliseconds>(options.idle_release, std::chrono::hours(24));
  idle_thread_ = std::jthread([this, interval](std::stop_token stop) { give_back_while_idle(std::move(stop), interval); });
  try {
    const std::lock_guard lock(registry().mutex);
    registry().process.store(::getpid());
    registry().running.push_back(this);
  } catch (...) {
    stop_idle_thread();
    throw;
  }
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

void device_stack::give_back_while_idle(std::stop_token stop, std::chrono::milliseconds interval) noexcept {
  // Its event queries and unmaps concern no capture: relaxed, they neither
  // fail nor break one that another thread makes meanwhile.
  const detail::relaxed_capture_scope relaxed;
  if (cudaSetDevice(device_id()) != cudaSuccess) return;  // events for the leaf's frees belong to its device
  std::array<std::uint64_t, 3> last_seen{~std::uint64_t{0}, 0, 0};
  std::unique_lock lock(idle_mutex_);
  while (!idle_wake_.wait_for(lock, stop, interval, [] { return false; }) && !stop.stop_requested()) {
    lock.unlock();
    try {
      // Work in the front alone (hits) counts too: the engine's bound follows a working set still in use.
      const cache_statistics front = front_.statistics();
      const coalescing_statistics engine = engine_.statistics();
      const std::array<std::uint64_t, 3> seen{front.hits + front.misses, engine.blocks_handed_out, engine.used_bytes};
      if (std::exchange(last_seen, seen) == seen) {
        static_cast<void>(engine_.release_idle());
        // Only what is done: a wait here would hold up the stack's destruction and the process's exit.
        leaf_.unmap_completed();
      }
    } catch (...) {  // no memory for the statistics: the next look tries again
    }
    lock.lock();
  }
}

void device_stack::give_back_at_exit() noexcept {
  // After a device reset what the stack held is gone, and a call would make a new context.
  if (!detail::has_active_context(device_id())) return;
  const detail::relaxed_capture_scope relaxed;  // as the idle thread: no capture of another thread breaks
  try {
    const detail::scoped_device on_its_device(device_id());  // later exit handlers find the thread's device as it was
    try {
      front_.release_without_waiting();
    } catch (...) {  // no memory for the list: the engine and the leaf give back what they can
    }
    // Work still queued before the last frees gets a moment to finish; what
    // is not done by then, what is live and graphs' memory (a graph may
    // replay until the end) the driver takes back when the process ends.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    for (;;) {
      static_cast<void>(engine_.release_idle(0));
      leaf_.unmap_completed();
      if (!engine_.has_frees_waiting_on_work() && !leaf_.has_frees_waiting_on_work()) break;
      if (std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  } catch (...) {  // the device could not be selected: the driver takes it all
  }
}

void device_stack::do_report(resource_state& state) const {
  const resource_state front = front_.state();
  const resource_state engine = engine_.state();
  const resource_state leaf = leaf_.state();
  const std::size_t front_cached = front.cached_bytes.value_or(0);
  // What users hold, as the front counts it: the engine's count also holds
  // the front's cached blocks, each rounded as the engine rounds it.
  state.used_bytes = front.used_bytes;
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
  if (device < -1)  // wrong on any machine: refused before CUDA is asked anything
    throw std::invalid_argument(
        fmt::format("default_device_stack: device ordinal {} is out of range: -1 names the current device", device));
  if (device == -1) CUDAPMR_CHECK(cudaGetDevice(&device));
  return detail::per_device_instance<device_stack>(device);
}

}  // namespace cudapmr
