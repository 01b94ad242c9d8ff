// SPDX-License-Identifier: Apache-2.0
// Every device stack README offers, captured: a graph that allocates a
// temporary, writes it, copies it out and frees it is instantiated and
// replayed 200 times with the right result each time and flat memory: what
// the stack holds and what the driver's graph memory holds do not grow.
#include "support/gpu.hpp"
#include "support/resource_cases.hpp"

#include <cudapmr/adaptors/caching_resource.hpp>
#include <cudapmr/adaptors/coalescing_resource.hpp>
#include <cudapmr/device_malloc_resource.hpp>
#include <cudapmr/device_memory_resource.hpp>
#include <cudapmr/device_stack.hpp>
#include <cudapmr/virtual_memory_resource.hpp>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

namespace cudapmr::test {
namespace {

/// A stack: its layers, bottom first, the top last.
struct captured_stack {
  captured_stack() = default;
  captured_stack(captured_stack&&) noexcept = default;
  captured_stack& operator=(captured_stack&&) = delete;
  ~captured_stack() {
    while (!layers.empty()) layers.pop_back();  // the top first: each layer frees into the one below
  }
  std::vector<std::unique_ptr<stream_ordered_resource>> layers;
  [[nodiscard]] stream_ordered_resource& top() const { return *layers.back(); }
  /// What the layers hold from the device, as each reports it.
  [[nodiscard]] std::size_t reserved() const {
    std::size_t held = 0;
    for (const auto& layer : layers) held = std::max(held, layer->state().reserved_bytes.value_or(0));
    return held;
  }
};

template <class Leaf>
captured_stack leaf_only() {
  captured_stack made;
  made.layers.push_back(std::make_unique<Leaf>(0));
  return made;
}

template <class Leaf, class Front, class Options>
captured_stack front_over(Options options) {
  captured_stack made;
  made.layers.push_back(std::make_unique<Leaf>(0));
  made.layers.push_back(std::make_unique<Front>(*made.layers.back(), options));
  return made;
}

struct device_pool_stack {
  static constexpr const char* name = "device_memory_resource";
  static captured_stack make() { return leaf_only<device_memory_resource>(); }
};
struct device_malloc_stack {
  static constexpr const char* name = "device_malloc_resource";
  static captured_stack make() { return leaf_only<device_malloc_resource>(); }
};
struct virtual_memory_stack {
  static constexpr const char* name = "virtual_memory_resource";
  static captured_stack make() { return leaf_only<virtual_memory_resource>(); }
};
struct caching_over_pool_stack {
  static constexpr const char* name = "caching_resource over device_memory_resource";
  static captured_stack make() { return front_over<device_memory_resource, caching_resource>(caching_options{}); }
};
struct caching_over_malloc_stack {
  static constexpr const char* name = "caching_resource over device_malloc_resource";
  static captured_stack make() { return front_over<device_malloc_resource, caching_resource>(caching_options{}); }
};
struct coalescing_over_malloc_stack {
  static constexpr const char* name = "coalescing_resource over device_malloc_resource";
  static captured_stack make() {
    return front_over<device_malloc_resource, coalescing_resource>(coalescing_options{});
  }
};
struct device_stack_stack {
  static constexpr const char* name = "device_stack";
  static captured_stack make() { return leaf_only<device_stack>(); }
};

template <class Stack>
class EveryStackCaptured : public ::testing::Test {};

using stacks = ::testing::Types<device_pool_stack, device_malloc_stack, virtual_memory_stack, caching_over_pool_stack,
                                caching_over_malloc_stack, coalescing_over_malloc_stack, device_stack_stack>;

struct stack_names {
  template <class Stack>
  static std::string GetName(int) {
    std::string name = Stack::name;
    for (char& c : name)
      if (c == ' ') c = '_';
    return name;
  }
};
TYPED_TEST_SUITE(EveryStackCaptured, stacks, stack_names);

std::size_t graph_memory_in_use() {
  std::uint64_t used = 0;
  EXPECT_EQ(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used), cudaSuccess);
  return static_cast<std::size_t>(used);
}

TYPED_TEST(EveryStackCaptured, AGraphThatAllocatesUsesAndFreesATemporaryReplaysRightWithFlatMemory) {
  CUDAPMR_REQUIRE_GPU();
  const captured_stack made = TypeParam::make();
  stream_ordered_resource& resource = made.top();
  const cudapmr::stream stream(0);
  load_test_kernels();
  constexpr std::size_t bytes = mebibyte;
  constexpr std::size_t count = bytes / sizeof(std::uint32_t);
  auto* result = static_cast<std::uint32_t*>(resource.allocate_async(bytes, stream));
  stream.synchronize();

  ASSERT_EQ(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal), cudaSuccess);
  void* temporary = nullptr;
  try {
    temporary = resource.allocate_async(bytes, stream);
  } catch (const std::exception& error) {
    cudaGraph_t broken = nullptr;
    static_cast<void>(cudaStreamEndCapture(stream.get(), &broken));
    if (broken != nullptr) static_cast<void>(cudaGraphDestroy(broken));
    resource.deallocate_async(result, bytes, stream);
    FAIL() << TypeParam::name << " refused an allocation during capture: " << error.what();
  }
  auto* words = static_cast<std::uint32_t*>(temporary);
  write_sequence(words, count, 7, stream);
  add_to_each(words, count, 2, stream);
  ASSERT_EQ(cudaMemcpyAsync(result, words, bytes, cudaMemcpyDeviceToDevice, stream.get()), cudaSuccess);
  resource.deallocate_async(temporary, bytes, stream);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream.get(), &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  std::size_t held_after_first = 0;
  std::size_t graph_memory_after_first = 0;
  for (int replay = 0; replay < 200; ++replay) {
    ASSERT_EQ(cudaMemsetAsync(result, 0, bytes, stream.get()), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream.get()), cudaSuccess);
    if (replay == 0 || replay == 199) {
      ASSERT_EQ(count_sequence_mismatches(result, count, 9, stream), 0u) << "replay " << replay;
    }
    if (replay == 0) {
      held_after_first = made.reserved();
      graph_memory_after_first = graph_memory_in_use();
    }
  }
  EXPECT_EQ(made.reserved(), held_after_first) << "replays took more memory from the stack";
  EXPECT_EQ(graph_memory_in_use(), graph_memory_after_first) << "replays took more graph memory";
  ASSERT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  ASSERT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  resource.deallocate_async(result, bytes, stream);
  stream.synchronize();
}

}  // namespace
}  // namespace cudapmr::test
