// SPDX-License-Identifier: Apache-2.0
#include "usage_report.hpp"

#include <cudapmr/interop/format.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace demo {

usage_report::watch::~watch() {
  try {
    std::optional<cudapmr::pool_stats> pool;
    if (const auto* pooled = dynamic_cast<const cudapmr::pool_resource*>(&counted_.upstream_resource()))
      pool = pooled->stats();
    report_.entries_.push_back({std::move(name_), counted_.statistics(), pool});
  } catch (...) {
    // A report line is not worth ending the program for.
  }
}

void usage_report::print() const {
  // Watches end in reverse order of their scopes; by name, the report follows the sections.
  std::vector<entry> entries = entries_;
  std::stable_sort(entries.begin(), entries.end(), [](const entry& a, const entry& b) { return a.name < b.name; });
  fmt::print("\nMemory report\n");
  for (const entry& recorded : entries) {
    fmt::print("  {}\n    usage: {}\n", recorded.name, recorded.usage);
    if (recorded.pool) fmt::print("    pool:  {}\n", *recorded.pool);
  }
}

}  // namespace demo
