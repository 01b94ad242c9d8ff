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

/// The host's NUMA nodes this process may use, by the operating system's
/// numbers, in order (a container may be kept to some; memory-only nodes, as
/// a Grace Hopper's GPU memory, are listed too). A machine without NUMA, or
/// one hwloc cannot describe, has one: node 0. Never empty.
[[nodiscard]] std::vector<int> host_numa_nodes();

/// The host NUMA node nearest `device`: the driver's answer
/// (`cudaDevAttrHostNumaId`) where it is one of `host_numa_nodes()`, else, where
/// the driver reports no NUMA, the node whose processors hwloc finds local to
/// the device's PCI slot. Empty where neither tells (the device is local to
/// several nodes, or its node is one this process may not use).
/// \throws std::invalid_argument for an ordinal with no device; cuda_error.
[[nodiscard]] std::optional<int> nearest_numa_node(int device);

/// The NUMA node whose memory holds the page at `address`, as the kernel
/// reports it (`move_pages` in query mode). Empty for a page not backed yet
/// (never touched), an address the kernel does not map, or where the kernel
/// does not answer (`move_pages` refused by a sandbox, or absent).
[[nodiscard]] std::optional<int> numa_node_of(const void* address) noexcept;

}  // namespace cudapmr
