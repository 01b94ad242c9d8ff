// SPDX-License-Identifier: Apache-2.0
#include "usage_report.hpp"

#include <cudapmr/interop/format.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace demo {
namespace {

/// The adaptors a watch puts over the resource: statistics, then history.
constexpr std::size_t watch_layers = 2;

}  // namespace

usage_report::watch::~watch() {
  try {
    report_.entries_.push_back({std::move(name_), counted_.statistics(), cudapmr::snapshot(counted_)});
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
    // Each layer of the watched resource as it reports itself (the snapshot's
    // first two are the watch's own statistics and history adaptors).
    const auto& layers = recorded.state.resources;
    for (std::size_t i = watch_layers; i < layers.size(); ++i) {
      const std::string holdings = cudapmr::describe_holdings(layers[i]);
      fmt::print("    {}{}{}\n", layers[i].name, holdings.empty() ? "" : ": ", holdings);
    }
  }
}

}  // namespace demo
