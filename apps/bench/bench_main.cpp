// SPDX-License-Identifier: Apache-2.0
// cudapmr_bench: Google Benchmark over every allocator and path, then a short
// markdown table of each cudapmr entrant against the best peer of its group.
//
// A benchmark named ".../<group>/<entrant>" takes part in the table when its
// group has an entrant named "peer:..." and one named "cudapmr:...". Rates
// (bytes per second) compare higher-is-better; times per item lower-is-better.
#include <benchmark/benchmark.h>

#include <cuda_runtime_api.h>
#include <cudapmr/version.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace bench {
void register_allocation_benchmarks();
void register_transfer_benchmarks();
}  // namespace bench

namespace {

struct measurement {
  std::string entrant;
  double value;  // ns per item, or GB/s
  bool is_rate;
};

/// The console reporter, also keeping every result for the summary.
class summarizing_reporter final : public benchmark::ConsoleReporter {
 public:
  /// Colours only on a terminal, so that logs stay greppable.
  summarizing_reporter()
      : ConsoleReporter(::isatty(::fileno(stdout)) != 0 ? OO_Defaults : OO_Tabular) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.error_occurred || run.run_type != Run::RT_Iteration) continue;
      const std::string& name = run.run_name.function_name;
      const auto slash = name.rfind('/');
      if (slash == std::string::npos) continue;
      std::string group = name.substr(0, slash);
      const std::string entrant = name.substr(slash + 1);
      if (run.threads > 1) group += fmt::format("/threads:{}", run.threads);
      const auto bytes = run.counters.find("bytes_per_second");
      const auto items = run.counters.find("items_per_second");
      if (bytes != run.counters.end() && bytes->second.value > 0) {
        groups_[group].push_back({entrant, bytes->second.value / 1e9, true});
      } else if (items != run.counters.end() && items->second.value > 0) {
        groups_[group].push_back({entrant, 1e9 / items->second.value, false});
      }
    }
  }

  void print_summary() const {
    fmt::print("\n## cudapmr against the best peer\n\n");
    fmt::print("| group | best peer | peer | best cudapmr | cudapmr | ratio |\n|---|---|---|---|---|---|\n");
    for (const auto& [group, entries] : groups_) {
      const measurement* best_peer = nullptr;
      const measurement* best_ours = nullptr;
      for (const measurement& entry : entries) {
        const bool peer = entry.entrant.rfind("peer:", 0) == 0;
        const bool ours = entry.entrant.rfind("cudapmr:", 0) == 0;
        const measurement*& best = peer ? best_peer : best_ours;
        if (!peer && !ours) continue;
        if (best == nullptr || (entry.is_rate ? entry.value > best->value : entry.value < best->value)) best = &entry;
      }
      if (best_peer == nullptr || best_ours == nullptr) continue;
      const char* unit = best_ours->is_rate ? "GB/s" : "ns";
      // The ratio is always "how many times better cudapmr is".
      const double ratio = best_ours->is_rate ? best_ours->value / best_peer->value : best_peer->value / best_ours->value;
      fmt::print("| {} | {} | {:.1f} {} | {} | {:.1f} {} | {:.2f}x |\n", group, best_peer->entrant.substr(5),
                 best_peer->value, unit, best_ours->entrant.substr(8), best_ours->value, unit, ratio);
    }
  }

 private:
  std::map<std::string, std::vector<measurement>> groups_;
};

}  // namespace

int main(int argc, char** argv) {
  // Google Benchmark parses the rest of the command line (--benchmark_filter=...).
  if (argc == 2 && std::string_view(argv[1]) == "--version") {
    fmt::print("cudapmr_bench (cudapmr {})\n", cudapmr::version_string());
    return 0;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    fmt::print(stderr, "cudapmr_bench: no CUDA device was found\n");
    return 2;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  bench::register_allocation_benchmarks();
  bench::register_transfer_benchmarks();
  summarizing_reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_summary();
  benchmark::Shutdown();
  return 0;
}
