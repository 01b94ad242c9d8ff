// SPDX-License-Identifier: Apache-2.0
#pragma once
// The host topology's internal half (src/host_topology.cpp): checking a node
// asked for, and running threads on a node's processors.

#include <cstddef>

namespace cudapmr::detail {

/// Checks that `node` is one of `host_numa_nodes()` or `any_numa_node`.
/// \throws std::invalid_argument naming `what`, the node and the machine's nodes.
void validate_numa_node(int node, const char* what);

/// The processors of `node` this process may run on (all of the machine's for `any_numa_node`).
[[nodiscard]] std::size_t numa_node_processors(int node);

/// Restricts the calling thread to the processors of `node` (and, for memory
/// it first touches, the node's memory). False where the system refused;
/// the thread then runs where it did before.
bool bind_this_thread_to_numa_node(int node) noexcept;

/// True where the calling thread may run only on processors of `node` (every
/// thread, on a machine with one node); false where unknown.
[[nodiscard]] bool this_thread_is_on_numa_node(int node) noexcept;

}  // namespace cudapmr::detail
