// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the tests need to know about the machine, and the kernels they run.

#include <cudapmr/device.hpp>
#include <cudapmr/stream.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <thread>
#include <vector>

namespace cudapmr::test {

/// True where at least one CUDA device exists.
/// compute-sanitizer's tools slow every access down and keep shadow state per
/// byte; under them some tests do less (the exhaustion test fills a capped
/// pool instead of the GPU). test/run_sanitizers.sh sets
/// CUDAPMR_UNDER_COMPUTE_SANITIZER; the tools also load themselves through
/// CUDA's injection variable.
inline bool under_compute_sanitizer() {
  if (std::getenv("CUDAPMR_UNDER_COMPUTE_SANITIZER") != nullptr) return true;
  const char* injection = std::getenv("CUDA_INJECTION64_PATH");
  return injection != nullptr && std::string_view(injection).find("sanitizer") != std::string_view::npos;
}

inline bool gpu_available() {
  static const bool available = device::count() > 0;
  return available;
}

/// Writes `seed + i` to each of `count` words at `data` (device-accessible), in stream order.
void write_sequence(std::uint32_t* data, std::size_t count, std::uint32_t seed, stream_ref stream);

/// Adds `increment` to each of `count` words, in stream order.
void add_to_each(std::uint32_t* data, std::size_t count, std::uint32_t increment, stream_ref stream);

/// Loads the kernels above now: under lazy loading (CUDA's default) a first
/// launch may wait for the device, which a stream_gate may be holding.
void load_test_kernels();

/// Counts, on the GPU, the words that differ from `seed + i`; synchronizes `stream`.
std::size_t count_sequence_mismatches(const std::uint32_t* data, std::size_t count, std::uint32_t seed,
                                      stream_ref stream);
/// As above, counting in `counter`, one device-accessible word the caller owns,
/// for when no memory can be allocated (a full GPU).
std::size_t count_sequence_mismatches(const std::uint32_t* data, std::size_t count, std::uint32_t seed,
                                      stream_ref stream, unsigned long long* counter);

/// The memory nodes of a graph: where it allocates and frees.
struct graph_memory_nodes {
  int allocations = 0;
  int frees = 0;
};

/// Counts `graph`'s memory nodes; a CUDA failure fails the test and counts -1 of each.
inline graph_memory_nodes count_memory_nodes(cudaGraph_t graph) {
  const auto failed = [](const char* call) {
    ADD_FAILURE() << call << " failed";
    return graph_memory_nodes{-1, -1};
  };
  std::size_t count = 0;
  if (cudaGraphGetNodes(graph, nullptr, &count) != cudaSuccess) return failed("cudaGraphGetNodes");
  std::vector<cudaGraphNode_t> nodes(count);
  if (count != 0 && cudaGraphGetNodes(graph, nodes.data(), &count) != cudaSuccess) return failed("cudaGraphGetNodes");
  graph_memory_nodes found;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    if (cudaGraphNodeGetType(node, &type) != cudaSuccess) return failed("cudaGraphNodeGetType");
    found.allocations += type == cudaGraphNodeTypeMemAlloc;
    found.frees += type == cudaGraphNodeTypeMemFree;
  }
  return found;
}

/// Holds a stream's later work back until `open()`: a host function queued on
/// the stream waits for the gate, so a test knows that work queued after it
/// has not run (an event recorded after it has not completed) until it says so.
/// Between making and opening a gate, make no call that waits for the device.
/// Under compute-sanitizer it holds nothing (`holding()` is false): a tool may
/// wait for the device inside calls that otherwise do not.
class stream_gate {
 public:
  explicit stream_gate(stream_ref stream) {
    if (under_compute_sanitizer()) return;
    load_test_kernels();
    auto* held = new std::shared_ptr<state>(state_);  // the host function's own reference
    if (cudaLaunchHostFunc(stream.get(), &hold_until_open, held) != cudaSuccess) {
      delete held;
      ADD_FAILURE() << "cudaLaunchHostFunc failed: the stream is not held back";
      return;
    }
    holding_ = true;
  }
  ~stream_gate() {
    open();
    if (state_->gave_up.load(std::memory_order_acquire)) ADD_FAILURE() << "a stream_gate was not opened within a minute";
  }
  stream_gate(const stream_gate&) = delete;
  stream_gate& operator=(const stream_gate&) = delete;
  void open() noexcept { state_->opened.store(true, std::memory_order_release); }
  /// Whether work queued on the stream after the gate waits for `open()`.
  [[nodiscard]] bool holding() const noexcept { return holding_; }

 private:
  struct state {
    std::atomic<bool> opened{false};
    std::atomic<bool> gave_up{false};
  };
  static void CUDART_CB hold_until_open(void* held) {
    const std::unique_ptr<std::shared_ptr<state>> owned(static_cast<std::shared_ptr<state>*>(held));
    // A test that never opens the gate fails instead of hanging.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
    while (!(*owned)->opened.load(std::memory_order_acquire)) {
      if (std::chrono::steady_clock::now() > deadline) {
        (*owned)->gave_up.store(true, std::memory_order_release);
        return;
      }
      std::this_thread::yield();
    }
  }
  std::shared_ptr<state> state_ = std::make_shared<state>();
  bool holding_ = false;
};

}  // namespace cudapmr::test

/// Skips the current test, visibly, where there is no GPU.
#define CUDAPMR_REQUIRE_GPU()                                              \
  do {                                                                     \
    if (!::cudapmr::test::gpu_available())                                 \
      GTEST_SKIP() << "no CUDA device was found: this test needs a GPU";   \
  } while (false)

/// Skips the current test, visibly, where fewer than `minimum` CUDA devices exist.
#define CUDAPMR_REQUIRE_GPUS(minimum)                                                            \
  do {                                                                                           \
    if (::cudapmr::device::count() < (minimum))                                                  \
      GTEST_SKIP() << "this test needs " << (minimum) << " GPUs; " << ::cudapmr::device::count() \
                   << " found";                                                                  \
  } while (false)
