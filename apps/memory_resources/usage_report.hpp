// SPDX-License-Identifier: Apache-2.0
#pragma once
// The demo's --report: peak and current usage of each resource it draws from,
// counted by statistics adaptors, and the reserve of each resource's pool.

#include <cudapmr/adaptors/statistics_adaptor.hpp>
#include <cudapmr/pool_resource.hpp>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace demo {

/// Collects one entry per watched resource and prints them after the sections.
class usage_report {
 public:
  /// Counts what is drawn from a resource through it, and adds the counters
  /// to the report when it goes away: declared before the buffers, it
  /// outlives them, so the report shows what was left allocated.
  class watch {
   public:
    watch(usage_report& report, std::string name, cudapmr::stream_ordered_resource& resource)
        : report_(report), name_(std::move(name)), counted_(resource) {}
    /// Records the counters; never throws (an entry that cannot be recorded is left out).
    ~watch();
    watch(const watch&) = delete;
    watch& operator=(const watch&) = delete;

    /// The resource to draw from.
    [[nodiscard]] cudapmr::stream_ordered_resource& resource() noexcept { return counted_; }

   private:
    usage_report& report_;
    std::string name_;
    cudapmr::statistics_adaptor counted_;
  };

  /// Prints every recorded entry, in the order the watches ended.
  void print() const;

 private:
  struct entry {
    std::string name;
    cudapmr::resource_statistics usage;
    std::optional<cudapmr::pool_stats> pool;
  };
  std::vector<entry> entries_;
};

}  // namespace demo
