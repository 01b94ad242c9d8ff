// SPDX-License-Identifier: Apache-2.0
#include "usage_report.hpp"

#include <cudapmr/interop/format.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace demo {

usage_report::watch::~watch() {
  try {
    std::optional<cudapmr::pool_stats> pool;
    if (const auto* pooled = dynamic_cast<const cudapmr::pool_resource*>(&history_.upstream_resource()))
      pool = pooled->stats();
    report_.entries_.push_back({std::move(name_), counted_.statistics(), pool, cudapmr::snapshot(counted_)});
  } catch (...) {
    // A report line is not worth ending the program for.
  }
}

std::vector<usage_report::entry> usage_report::sorted_entries() const {
  // Watches end in reverse order of their scopes; by name, the report follows the sections.
  std::vector<entry> entries = entries_;
  std::stable_sort(entries.begin(), entries.end(), [](const entry& a, const entry& b) { return a.name < b.name; });
  return entries;
}

std::vector<cudapmr::memory_snapshot> usage_report::snapshots() const {
  std::vector<cudapmr::memory_snapshot> states;
  for (const entry& recorded : sorted_entries()) states.push_back(recorded.state);
  return states;
}

void usage_report::print() const {
  fmt::print("\nMemory report\n");
  for (const entry& recorded : sorted_entries()) {
    fmt::print("  {}\n    usage: {}\n", recorded.name, recorded.usage);
    fmt::print("    peak bytes: {} ({} events recorded)\n", recorded.usage.bytes.peak, recorded.state.events.size());
    if (recorded.pool) fmt::print("    pool:  {}\n", *recorded.pool);
    // Where pinned memory's pages are: the leaf's own report.
    if (recorded.state.resources.empty()) continue;
    const cudapmr::resource_state& leaf = recorded.state.resources.back();
    if (leaf.kind != cudapmr::memory_kind::pinned) continue;
    const std::string node = leaf.numa_node ? fmt::format("NUMA node {}", *leaf.numa_node) : "any NUMA node";
    fmt::print("    pages: {}{}\n", node, leaf.note.empty() ? "" : fmt::format(" ({})", leaf.note));
  }
}

}  // namespace demo
