// SPDX-License-Identifier: Apache-2.0
// Host memory where the GPU is: the host's NUMA nodes, pinned pools on a
// chosen node (checked page by page with the kernel's own answer), and the
// staging blocks and copy threads of pageable copies on the device's node.
#include "support/resource_cases.hpp"

#include <cudapmr/detail/host_thread_pool.hpp>
#include <cudapmr/detail/host_topology.hpp>
#include <cudapmr/detail/staged_copy.hpp>
#include <cudapmr/host_topology.hpp>
#include <cudapmr/memory_snapshot.hpp>
#include <cudapmr/pinned_memory_resource.hpp>
#include <cudapmr/snapshot_export.hpp>

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace cudapmr::test {
namespace {

using detail::host_thread_pool;

constexpr std::size_t page_bytes = 4096;

/// Skips where the kernel does not say where pages are (a sandbox that
/// forbids move_pages): a page just written must have a node.
#define CUDAPMR_REQUIRE_PAGE_QUERIES()                                                                 \
  do {                                                                                                 \
    std::vector<unsigned char> probe(page_bytes * 2, 1);                                               \
    if (!numa_node_of(probe.data() + page_bytes))                                                      \
      GTEST_SKIP() << "the kernel does not report where pages are here (move_pages refused)";          \
  } while (false)

/// Says, in the test's output, that a one-node machine cannot tell near from far.
void note_single_node() {
  if (host_numa_nodes().size() == 1) {
    std::cout << "[ NOTE     ] this machine has one NUMA node (" << host_numa_nodes().front()
              << "): every node asked for is the near one\n";
    ::testing::Test::RecordProperty("single_numa_node", "true");
  }
}

/// The node each page of [data, data + bytes) is on; empty for a page with none.
std::vector<std::optional<int>> page_nodes(const void* data, std::size_t bytes) {
  std::vector<std::optional<int>> nodes;
  for (std::size_t offset = 0; offset < bytes; offset += page_bytes)
    nodes.push_back(numa_node_of(static_cast<const unsigned char*>(data) + offset));
  return nodes;
}

TEST(HostTopology, NodesAreListedInOrderNeverEmpty) {
  const std::vector<int> nodes = host_numa_nodes();
  ASSERT_FALSE(nodes.empty());
  EXPECT_TRUE(std::is_sorted(nodes.begin(), nodes.end()));
  EXPECT_EQ(std::set<int>(nodes.begin(), nodes.end()).size(), nodes.size());
  const bool sysfs = std::filesystem::exists("/sys/devices/system/node");
  for (const int node : nodes) {
    EXPECT_GE(node, 0);
    // The kernel's own list of nodes, where sysfs is mounted.
    if (sysfs) {
      EXPECT_TRUE(std::filesystem::exists("/sys/devices/system/node/node" + std::to_string(node))) << node;
    }
  }
  note_single_node();
}

TEST(HostTopology, AWrittenPageIsOnAListedNodeAndAnUntouchedOneOnNone) {
  CUDAPMR_REQUIRE_PAGE_QUERIES();
  const std::vector<int> nodes = host_numa_nodes();
  std::vector<unsigned char> written(16 * page_bytes, 7);
  const std::optional<int> node = numa_node_of(written.data() + 8 * page_bytes);
  ASSERT_TRUE(node.has_value());
  EXPECT_NE(std::find(nodes.begin(), nodes.end(), *node), nodes.end()) << *node;

  void* untouched = ::mmap(nullptr, page_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(untouched, MAP_FAILED);
  EXPECT_FALSE(numa_node_of(untouched).has_value()) << "a page never touched has no memory yet";
  ::munmap(untouched, page_bytes);
}

TEST(HostTopology, AnUnknownNodeIsRefusedByNumberAndTheMachineSays) {
  for (const int node : {9999, -7}) {
    try {
      host_thread_pool pool(2, node);
      ADD_FAILURE() << "node " << node << " was accepted";
    } catch (const std::invalid_argument& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("NUMA node " + std::to_string(node)), std::string::npos) << message;
      EXPECT_NE(message.find(std::to_string(host_numa_nodes().front())), std::string::npos) << message;
    }
  }
}

// Before any CUDA call: the same refusal on a machine without a GPU.
TEST(PinnedNuma, AnUnknownNodeIsRefusedBeforeCuda) {
  for (const int node : {9999, -2}) {
    pinned_pool_options options;
    options.numa_node = node;
    try {
      const pinned_memory_resource pinned(options);
      ADD_FAILURE() << "node " << node << " was accepted";
    } catch (const std::invalid_argument& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("pinned_pool_options::numa_node"), std::string::npos) << message;
      EXPECT_NE(message.find(std::to_string(node)), std::string::npos) << message;
    }
  }
}

/// What ran a pool's job: the processors its workers used, and whether the submitter ran a part.
struct job_record {
  std::set<int> worker_processors;
  std::size_t worker_threads = 0;
  bool submitter_ran = false;
};

/// Runs a job whose first parts wait (up to 20 s) until two threads have
/// joined in, so that a worker takes part even where the submitter is fast.
job_record run_recorded(host_thread_pool& pool, std::size_t parts) {
  std::mutex mutex;
  job_record record;
  std::set<std::thread::id> workers;
  std::set<std::thread::id> joined;
  const std::thread::id submitter = std::this_thread::get_id();
  pool.run(parts, [&](std::size_t) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (;;) {
      const std::lock_guard lock(mutex);
      joined.insert(std::this_thread::get_id());
      if (joined.size() >= 2 || std::chrono::steady_clock::now() > deadline) break;
    }
    const int processor = ::sched_getcpu();
    const std::lock_guard lock(mutex);
    if (std::this_thread::get_id() == submitter) {
      record.submitter_ran = true;
    } else {
      record.worker_processors.insert(processor);
      workers.insert(std::this_thread::get_id());
    }
  });
  record.worker_threads = workers.size();
  return record;
}

/// Whether the kernel counts `processor` on `node`, where sysfs tells.
std::optional<bool> processor_on_node(int processor, int node) {
  if (!std::filesystem::exists("/sys/devices/system/node")) return std::nullopt;
  return std::filesystem::exists("/sys/devices/system/node/node" + std::to_string(node) + "/cpu" +
                                 std::to_string(processor));
}

/// Whether sysfs lists processors of `node` (a memory-only node, as a
/// Grace Hopper's GPU memory or a CXL expander, has none); true where sysfs is not mounted.
bool node_has_own_processors(int node) {
  const std::filesystem::path directory = "/sys/devices/system/node/node" + std::to_string(node);
  if (!std::filesystem::exists(directory)) return true;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 3 && name.compare(0, 3, "cpu") == 0 && std::isdigit(static_cast<unsigned char>(name[3])) != 0)
      return true;
  }
  return false;
}

TEST(HostThreadPoolOnANode, WorkersRunOnlyOnTheNodesProcessors) {
  note_single_node();
  for (const int node : host_numa_nodes()) {
    if (!node_has_own_processors(node)) continue;
    host_thread_pool pool(4, node);
    EXPECT_EQ(pool.numa_node(), node);
    EXPECT_EQ(pool.concurrency(), 4u) << "three workers and the caller";
    const job_record record = run_recorded(pool, 64);
    EXPECT_EQ(pool.bound_workers(), 3u) << "the system refused to bind a worker to node " << node;
    EXPECT_GE(record.worker_threads, 1u);
    for (const int processor : record.worker_processors) {
      EXPECT_NE(processor_on_node(processor, node), std::optional<bool>(false))
          << "a worker ran on processor " << processor << ", not on node " << node;
    }
    // A submitter that may run elsewhere only waits (one on the node may help, or find the workers done first).
    if (!detail::this_thread_is_on_numa_node(node)) {
      EXPECT_FALSE(record.submitter_ran) << "node " << node;
    }
  }
}

/// Two nodes with processors of their own, or empty.
std::optional<std::pair<int, int>> two_nodes_with_processors() {
  std::vector<int> nodes;
  for (const int node : host_numa_nodes())
    if (node_has_own_processors(node)) nodes.push_back(node);
  if (nodes.size() < 2) return std::nullopt;
  return std::pair{nodes.front(), nodes.back()};
}

TEST(HostThreadPoolOnANode, ASubmitterOnAnotherNodeOnlyWaits) {
  const auto nodes = two_nodes_with_processors();
  if (!nodes) GTEST_SKIP() << "this machine has fewer than two NUMA nodes with processors";
  host_thread_pool pool(4, nodes->first);
  job_record record;
  bool bound = false;
  std::thread submitter([&] {
    bound = detail::bind_this_thread_to_numa_node(nodes->second) &&
            !detail::this_thread_is_on_numa_node(nodes->first);
    if (bound) record = run_recorded(pool, 64);
  });
  submitter.join();
  if (!bound) GTEST_SKIP() << "the submitter could not be kept to node " << nodes->second << " alone";
  EXPECT_FALSE(record.submitter_ran) << "a submitter on node " << nodes->second << " copied for node "
                                     << nodes->first;
  for (const int processor : record.worker_processors)
    EXPECT_NE(processor_on_node(processor, nodes->first), std::optional<bool>(false)) << processor;
}

TEST(HostThreadPoolOnANode, TheLibrarysCopyPoolOfANodeIsOnIt) {
  for (const int node : host_numa_nodes()) {
    host_thread_pool& pool = detail::host_copy_pool(node);
    EXPECT_EQ(pool.numa_node(), node);
    EXPECT_EQ(&detail::host_copy_pool(node), &pool) << "one pool per node";
    EXPECT_GE(pool.concurrency(), 1u);
  }
  EXPECT_EQ(&detail::host_copy_pool(any_numa_node), &detail::host_copy_pool());
}

// ---- on a GPU ----------------------------------------------------------------

TEST(PinnedNuma, PagesAreOnTheNodeAskedFor) {
  CUDAPMR_REQUIRE_GPU();
  CUDAPMR_REQUIRE_PAGE_QUERIES();
  note_single_node();
  constexpr std::size_t bytes = 4 * mebibyte;
  for (const int node : host_numa_nodes()) {
    pinned_pool_options options;
    options.numa_node = node;
    pinned_memory_resource pinned(options);
    if (!pinned.placement_note().empty()) {
      // The driver refused the node: the fallback is visible and still works.
      EXPECT_FALSE(pinned.numa_node().has_value());
      std::cout << "[ NOTE     ] " << pinned.placement_note() << "\n";
    } else {
      EXPECT_EQ(pinned.numa_node(), node);
      EXPECT_NE(pinned.description().find("NUMA node " + std::to_string(node)), std::string::npos)
          << pinned.description();
    }
    void* block = pinned.allocate(bytes);
    std::memset(block, 0x5a, bytes);
    if (pinned.numa_node()) {
      // Pages the kernel gives no answer for are not counted; every answer must name the node.
      const std::vector<std::optional<int>> nodes = page_nodes(block, bytes);
      const auto answered = std::count_if(nodes.begin(), nodes.end(), [](auto page) { return page.has_value(); });
      const auto elsewhere =
          std::count_if(nodes.begin(), nodes.end(), [node](auto page) { return page && *page != node; });
      EXPECT_GT(answered, 0) << "the kernel located none of the " << nodes.size() << " pages";
      EXPECT_EQ(elsewhere, 0) << elsewhere << " of " << answered << " pages are not on node " << node;
    }
    pinned.deallocate(block, bytes);
  }
}

TEST(PinnedNuma, TheDefaultIsOnTheNodeNearestTheDevice) {
  CUDAPMR_REQUIRE_GPU();
  note_single_node();
  const std::optional<int> nearest = nearest_numa_node(device::current().ordinal());
  std::cout << "[ NOTE     ] device " << device::current().ordinal() << " is nearest NUMA node "
            << (nearest ? std::to_string(*nearest) : std::string("(unknown)")) << "\n";
  for (const bool owned : {false, true}) {
    const pinned_memory_resource pinned = owned ? pinned_memory_resource(pinned_pool_options{}) : pinned_memory_resource();
    if (pinned.placement_note().empty()) {
      EXPECT_EQ(pinned.numa_node(), nearest) << (owned ? "owned pool" : "default pool");
    } else {
      EXPECT_FALSE(pinned.numa_node().has_value());
      std::cout << "[ NOTE     ] " << pinned.placement_note() << "\n";
    }
    // The node shows where users read a resource's state.
    const resource_state state = pinned.state();
    EXPECT_EQ(state.numa_node, pinned.numa_node());
    EXPECT_EQ(state.note, pinned.placement_note());
    if (pinned.numa_node()) {
      EXPECT_NE(to_json(snapshot(pinned)).find("\"numa_node\":" + std::to_string(*pinned.numa_node())),
                std::string::npos);
    }
  }
}

TEST(PinnedNuma, AnyNodeLeavesThePagesToTheKernel) {
  CUDAPMR_REQUIRE_GPU();
  pinned_pool_options options;
  options.numa_node = any_numa_node;
  pinned_memory_resource pinned(options);
  EXPECT_FALSE(pinned.numa_node().has_value());
  EXPECT_TRUE(pinned.placement_note().empty()) << pinned.placement_note();
  void* block = pinned.allocate(mebibyte);
  std::memset(block, 1, mebibyte);
  pinned.deallocate(block, mebibyte);
}

TEST(StagingOnTheDevicesNode, BlocksAndThreadsAreWhereTheDeviceIs) {
  CUDAPMR_REQUIRE_GPU();
  const int node = detail::staging_numa_node(0);
  EXPECT_EQ(node, nearest_numa_node(0).value_or(any_numa_node));
  const pinned_memory_resource& staging = detail::staging_pool(node);
  if (staging.placement_note().empty() && node != any_numa_node) {
    EXPECT_EQ(staging.numa_node(), node);
  }
  EXPECT_EQ(detail::host_copy_pool(node).numa_node(), node);

  // A staged copy through each node gives the bytes back whichever node stages it.
  const stream on(0);
  device_memory_resource device_memory(0);
  constexpr std::size_t bytes = 8 * mebibyte + 4096;
  std::vector<unsigned char> source(bytes);
  for (std::size_t i = 0; i < bytes; ++i) source[i] = static_cast<unsigned char>(i * 131 + 7);
  void* on_device = device_memory.allocate_async(bytes, on);
  for (const int staging_node : host_numa_nodes()) {
    std::vector<unsigned char> back(bytes, 0);
    detail::staged_copy_to_device(on_device, source.data(), bytes, on, staging_node);
    detail::staged_copy_to_host(back.data(), on_device, bytes, on, staging_node);
    EXPECT_EQ(back, source) << "staged through node " << staging_node;
  }
  device_memory.deallocate_async(on_device, bytes, on);
  on.synchronize();
}

}  // namespace
}  // namespace cudapmr::test
