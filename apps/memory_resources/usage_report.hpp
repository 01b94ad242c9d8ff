// SPDX-License-Identifier: Apache-2.0
#pragma once
// The demo's --report: peak and current usage of each resource it draws from,
// counted by statistics adaptors, and what each of its layers holds as it
// reports itself (a pool's reserve, a cache, where a pinned pool's pages are);
// each resource's history and state for --snapshot and --trace.

#include <cudapmr/adaptors/history_adaptor.hpp>
#include <cudapmr/adaptors/statistics_adaptor.hpp>
#include <cudapmr/memory_snapshot.hpp>

#include <string>
#include <utility>
#include <vector>

namespace demo {

/// Collects one entry per watched resource and prints them after the sections.
class usage_report {
 public:
  /// Counts what is drawn from a resource through it, records its history,
  /// and adds the counters and a snapshot to the report when it goes away:
  /// declared before the buffers, it outlives them, so the report shows what
  /// was left allocated.
  class watch {
   public:
    watch(usage_report& report, std::string name, cudapmr::stream_ordered_resource& resource)
        : report_(report), name_(std::move(name)), history_(resource), counted_(history_) {}
    /// Records the counters; never throws (an entry that cannot be recorded is left out).
    ~watch();
    watch(const watch&) = delete;
    watch& operator=(const watch&) = delete;

    /// The resource to draw from.
    [[nodiscard]] cudapmr::stream_ordered_resource& resource() noexcept { return counted_; }
    /// Its history, to annotate.
    [[nodiscard]] cudapmr::history_adaptor& history() noexcept { return history_; }

   private:
    usage_report& report_;
    std::string name_;
    cudapmr::history_adaptor history_;
    cudapmr::statistics_adaptor counted_;
  };

  /// Prints every recorded entry, in the order the watches ended.
  void print() const;
  /// Each entry's snapshot, in the order `print()` lists them.
  [[nodiscard]] std::vector<cudapmr::memory_snapshot> snapshots() const;

 private:
  struct entry {
    std::string name;
    cudapmr::resource_statistics usage;
    cudapmr::memory_snapshot state;
  };
  [[nodiscard]] std::vector<entry> sorted_entries() const;

  std::vector<entry> entries_;
};

}  // namespace demo
