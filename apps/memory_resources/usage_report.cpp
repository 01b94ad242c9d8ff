// SPDX-License-Identifier: Apache-2.0
#include "usage_report.hpp"

#include <cudapmr/interop/format.hpp>
#include <cudapmr/pinned_memory_resource.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace demo {

usage_report::watch::~watch() {
  try {
    std::optional<cudapmr::pool_stats> pool;
    if (const auto* pooled = dynamic_cast<const cudapmr::pool_resource*>(&history_.upstream_resource()))
      pool = pooled->stats();
    std::string placement;
    if (const auto* pinned = dynamic_cast<const cudapmr::pinned_memory_resource*>(&history_.upstream_resource())) {
      const std::optional<int> node = pinned->numa_node();
      placement = node ? fmt::format("NUMA node {}", *node) : "any NUMA node";
      if (!pinned->placement_note().empty()) placement += fmt::format(" ({})", pinned->placement_note());
    }
    report_.entries_.push_back(
        {std::move(name_), counted_.statistics(), pool, std::move(placement), cudapmr::snapshot(counted_)});
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
    if (!recorded.placement.empty()) fmt::print("    pages: {}\n", recorded.placement);
  }
}

}  // namespace demo
