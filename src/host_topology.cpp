// SPDX-License-Identifier: Apache-2.0
// The host's NUMA nodes through hwloc, loaded once; the kernel's own answer
// for where a page lives.
#include "cudapmr/host_topology.hpp"

#include "cudapmr/detail/cuda_check.hpp"
#include "cudapmr/detail/host_topology.hpp"
#include "cudapmr/device.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <hwloc.h>
#include <hwloc/cudart.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <thread>

namespace cudapmr {
namespace {

struct bitmap_deleter {
  void operator()(hwloc_bitmap_s* bitmap) const noexcept { hwloc_bitmap_free(bitmap); }
};
using bitmap = std::unique_ptr<hwloc_bitmap_s, bitmap_deleter>;

bitmap new_bitmap() {
  bitmap made(hwloc_bitmap_alloc());
  if (!made) throw std::bad_alloc();
  return made;
}

/// The machine's topology, loaded at first use and never destroyed (threads
/// of never-destroyed pools bind themselves through it at any time). Read-only
/// once loaded, which hwloc makes safe to share between threads. Where hwloc
/// cannot load it, or describes another machine (HWLOC_XMLFILE and friends),
/// the process sees one node, 0, and binds nothing.
class topology final {
 public:
  topology() {
    if (hwloc_topology_init(&topology_) != 0) topology_ = nullptr;
    else if (hwloc_topology_load(topology_) != 0 || hwloc_topology_is_thissystem(topology_) == 0) {
      hwloc_topology_destroy(topology_);
      topology_ = nullptr;
    }
    if (topology_ == nullptr) {
      nodes_.push_back(0);
      return;
    }
    const int count = hwloc_get_nbobjs_by_type(topology_, HWLOC_OBJ_NUMANODE);
    for (int index = 0; index < count; ++index)
      nodes_.push_back(static_cast<int>(hwloc_get_obj_by_type(topology_, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(index))->os_index));
    std::sort(nodes_.begin(), nodes_.end());
    if (nodes_.empty()) nodes_.push_back(0);  // hwloc always reports one; kept true should it not
  }
  topology(const topology&) = delete;
  topology& operator=(const topology&) = delete;

  [[nodiscard]] const std::vector<int>& nodes() const noexcept { return nodes_; }

  /// Whether the nodes are hwloc's (else the one-node stand-in).
  [[nodiscard]] bool loaded() const noexcept { return topology_ != nullptr; }

  /// The node of OS number `node`, or null.
  [[nodiscard]] hwloc_obj_t node(int node) const noexcept {
    if (topology_ == nullptr) return nullptr;
    return hwloc_get_numanode_obj_by_os_index(topology_, static_cast<unsigned>(node));
  }

  /// The one node whose processors are local to `device`'s PCI slot, or empty.
  [[nodiscard]] std::optional<int> node_local_to(int device) const {
    if (topology_ == nullptr) return std::nullopt;
    const bitmap processors = new_bitmap();
    if (hwloc_cudart_get_device_cpuset(topology_, device, processors.get()) != 0) return std::nullopt;
    const bitmap nodes = new_bitmap();
    hwloc_cpuset_to_nodeset(topology_, processors.get(), nodes.get());
    if (hwloc_bitmap_weight(nodes.get()) != 1) return std::nullopt;
    return hwloc_bitmap_first(nodes.get());
  }

  [[nodiscard]] std::size_t processors(int node_number) const {
    if (topology_ == nullptr) return std::max(1U, std::thread::hardware_concurrency());
    const hwloc_const_cpuset_t set =
        node_number == any_numa_node ? hwloc_topology_get_allowed_cpuset(topology_) : node(node_number)->cpuset;
    const int weight = hwloc_bitmap_weight(set);
    return weight > 0 ? static_cast<std::size_t>(weight) : 0;
  }

  bool thread_is_on(int node_number) const noexcept {
    if (topology_ == nullptr) return true;  // one node: every thread is on it
    const hwloc_obj_t found = node(node_number);
    hwloc_bitmap_s* where = hwloc_bitmap_alloc();
    if (found == nullptr || where == nullptr) {
      hwloc_bitmap_free(where);
      return false;
    }
    const bool on = hwloc_get_cpubind(topology_, where, HWLOC_CPUBIND_THREAD) == 0 &&
                    hwloc_bitmap_isincluded(where, found->cpuset) != 0;
    hwloc_bitmap_free(where);
    return on;
  }

  bool bind_this_thread(int node_number) const noexcept {
    const hwloc_obj_t found = node(node_number);
    if (found == nullptr || hwloc_bitmap_iszero(found->cpuset)) return false;
    if (hwloc_set_cpubind(topology_, found->cpuset, HWLOC_CPUBIND_THREAD) != 0) return false;
    // Best effort: first-touched memory on the node too; the processors are what matter.
    static_cast<void>(hwloc_set_membind(topology_, found->nodeset, HWLOC_MEMBIND_BIND,
                                        HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET));
    return true;
  }

 private:
  hwloc_topology_t topology_ = nullptr;
  std::vector<int> nodes_;
};

const topology& the_topology() {
  static const auto* const loaded = new topology();
  return *loaded;
}

}  // namespace

std::vector<int> host_numa_nodes() { return the_topology().nodes(); }

std::optional<int> nearest_numa_node(int device) {
  detail::validate_device_ordinal(device);
  int node = -1;
  CUDAPMR_CHECK(cudaDeviceGetAttribute(&node, cudaDevAttrHostNumaId, device));
  const std::vector<int>& nodes = the_topology().nodes();
  // The driver's node, where this process may use it (a container may be
  // kept off the device's node: hwloc lists only the nodes it is allowed).
  if (node >= 0 && std::find(nodes.begin(), nodes.end(), node) != nodes.end()) return node;
  if (node >= 0) return std::nullopt;
  // The driver reports no NUMA: a machine with one node has only that one;
  // otherwise the node whose processors sit by the device's PCI slot.
  if (nodes.size() == 1) return nodes.front();
  // hwloc's PCI query may leave a refusal behind: cleared, but not an error the caller had left pending.
  const bool nothing_pending = cudaPeekAtLastError() == cudaSuccess;
  const std::optional<int> local = the_topology().node_local_to(device);
  if (nothing_pending) static_cast<void>(cudaGetLastError());
  return local;
}

std::optional<int> numa_node_of(const void* address) noexcept {
  const auto page_size = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  void* page = reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(address) & ~(page_size - 1));
  int status = -1;
  // With no target nodes, move_pages moves nothing and reports each page's node.
  if (::syscall(SYS_move_pages, 0, 1UL, &page, nullptr, &status, 0) != 0 || status < 0) return std::nullopt;
  return status;
}

namespace detail {

void validate_numa_node(int node, const char* what) {
  if (node == any_numa_node) return;
  const std::vector<int>& nodes = the_topology().nodes();
  if (std::find(nodes.begin(), nodes.end(), node) != nodes.end()) return;
  throw std::invalid_argument(fmt::format("{}: NUMA node {} is not one this process may use; it has node{} {} (or {} for any)",
                                          what, node, nodes.size() == 1 ? "" : "s", fmt::join(nodes, ", "),
                                          any_numa_node));
}

std::size_t numa_node_processors(int node) {
  validate_numa_node(node, "numa_node_processors");
  return the_topology().processors(node);
}

bool bind_this_thread_to_numa_node(int node) noexcept {
  try {
    return node != any_numa_node && the_topology().bind_this_thread(node);
  } catch (...) {  // the topology could not be loaded
    return false;
  }
}

bool this_thread_is_on_numa_node(int node) noexcept {
  try {
    return node != any_numa_node && the_topology().thread_is_on(node);
  } catch (...) {  // the topology could not be loaded
    return false;
  }
}

}  // namespace detail
}  // namespace cudapmr
