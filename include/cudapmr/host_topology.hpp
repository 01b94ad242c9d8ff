// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file host_topology.hpp
/// The host's NUMA nodes, as the kernel and hwloc describe them, and which of
/// them is nearest a device: where pinned pools, staging blocks and copy
/// threads belong (docs/performance.md, "Host memory where the GPU is").

#include <optional>
#include <vector>

namespace cudapmr {

/// A NUMA node to ask for where the kernel should choose: pinned pools with
/// it are CUDA's plain host pools (`cudaMemLocationTypeHost`).
inline constexpr int any_numa_node = -1;

/// The host's NUMA nodes, by the operating system's numbers, in order. A
/// machine without NUMA has one, node 0. Never empty.
[[nodiscard]] std::vector<int> host_numa_nodes();

/// The host NUMA node nearest `device`: the driver's answer
/// (`cudaDevAttrHostNumaId`), else the node whose processors hwloc finds local
/// to the device's PCI slot. Empty where neither can tell (a machine whose
/// driver reports no NUMA and whose device is local to several nodes).
/// \throws std::invalid_argument for an ordinal with no device; cuda_error.
[[nodiscard]] std::optional<int> nearest_numa_node(int device);

/// The NUMA node whose memory holds the page at `address`, as the kernel
/// reports it (`move_pages` in query mode). Empty for a page not backed yet
/// (never touched) or an address the kernel does not map.
[[nodiscard]] std::optional<int> numa_node_of(const void* address) noexcept;

}  // namespace cudapmr
