// SPDX-License-Identifier: Apache-2.0
// cudapmr_stress: random allocations, frees, copies, fills and kernels from
// many threads over every resource and adaptor stack, each allocation's
// pattern checked before it is freed, every counter balanced at the end.
#include "stress.hpp"

#include <cudapmr/error.hpp>

#include <fmt/format.h>

#include <charconv>
#include <cstdio>
#include <stdexcept>
#include <string_view>

namespace {

constexpr int exit_passed = 0;
constexpr int exit_check_failed = 1;
constexpr int exit_unusable = 2;

constexpr std::string_view usage = R"(usage: cudapmr_stress [--operations N] [--threads T] [--streams S]
                      [--max-bytes B] [--max-live L] [--seed X] [--host-only] [--help]

Random allocations (of random size and alignment), frees, copies, fills and
kernels from T threads over S streams, across the device, pinned, managed
and host resources, caching_resource over each, and every adaptor stacked
over each. One stream-ordered free in four goes to another stream, ordered
by an event, as a consumer stream's would; one operation in a thousand
captures a graph that allocates from a device target, stamps, checks and
frees, and launches it twice. Each live allocation holds a
pattern checked before it is freed;
at the end every counter must balance and every pool hold no used memory.

  --operations N  random operations in all (default 1000000)
  --threads T     threads (default 16)
  --streams S     streams the threads share (default 4)
  --max-bytes B   the largest allocation (default 1048576)
  --max-live L    the most allocations a thread holds at once (default 64)
  --seed X        seed of the random choices (default 1)
  --host-only     the host resource and adaptors over it only: no GPU needed

Exit status: 0 all checks passed, 1 a check failed, 2 unusable arguments or no GPU.
)";

/// Arguments that cannot be used.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class Unsigned>
Unsigned parse_count(std::string_view flag, std::string_view text) {
  Unsigned value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || value == 0)
    throw usage_error(fmt::format("{} {}: not a positive integer in range", flag, text));
  return value;
}

/// Returns false when --help was asked for.
bool parse_arguments(int argc, char** argv, stress::options& chosen) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") return false;
    if (flag == "--host-only") {
      chosen.host_only = true;
      continue;
    }
    if (i + 1 >= argc) throw usage_error(fmt::format("{} needs a value (or is unknown)", flag));
    const std::string_view value = argv[++i];
    if (flag == "--operations") chosen.operations = parse_count<std::uint64_t>(flag, value);
    else if (flag == "--threads") chosen.threads = parse_count<unsigned>(flag, value);
    else if (flag == "--streams") chosen.streams = parse_count<unsigned>(flag, value);
    else if (flag == "--max-bytes") chosen.max_bytes = parse_count<std::size_t>(flag, value);
    else if (flag == "--max-live") chosen.max_live = parse_count<std::size_t>(flag, value);
    else if (flag == "--seed") chosen.seed = parse_count<std::uint64_t>(flag, value);
    else throw usage_error(fmt::format("unknown argument {}", flag));
  }
  return true;
}

void print(const stress::options& chosen, const stress::report& result) {
  fmt::print("{:<18} {:>10} {:>14} {:>10} {:>9} {:>9} {:>9} {:>7} {:>10}\n", "target", "allocs", "bytes", "frees",
             "copies", "fills", "kernels", "graphs", "mismatches");
  stress::target_report total{"total"};
  for (const stress::target_report& line : result.targets) {
    fmt::print("{:<18} {:>10} {:>14} {:>10} {:>9} {:>9} {:>9} {:>7} {:>10}\n", line.name, line.allocations,
               line.bytes_allocated, line.frees, line.copies, line.fills, line.kernels, line.graphs, line.mismatches);
    total.allocations += line.allocations;
    total.bytes_allocated += line.bytes_allocated;
    total.frees += line.frees;
    total.copies += line.copies;
    total.fills += line.fills;
    total.kernels += line.kernels;
    total.graphs += line.graphs;
    total.mismatches += line.mismatches;
  }
  fmt::print("{:<18} {:>10} {:>14} {:>10} {:>9} {:>9} {:>9} {:>7} {:>10}\n", total.name, total.allocations,
             total.bytes_allocated, total.frees, total.copies, total.fills, total.kernels, total.graphs,
             total.mismatches);
  for (const std::string& failure : result.failures) fmt::print("FAILED: {}\n", failure);
  fmt::print("stress: {} operations (and {} final frees) by {} threads over {} streams on {} targets in {:.2f} s: "
             "{:.0f} operations/s; {} mismatches, {} failures\n",
             result.operations, result.final_frees, chosen.threads, chosen.streams, result.targets.size(),
             result.seconds, static_cast<double>(result.operations) / result.seconds, total.mismatches,
             result.failure_count);
}

}  // namespace

int main(int argc, char** argv) {
  stress::options chosen;
  try {
    if (!parse_arguments(argc, argv, chosen)) {
      fmt::print("{}", usage);
      return exit_passed;
    }
    const stress::report result = stress::run(chosen);
    print(chosen, result);
    return result.failure_count == 0 ? exit_passed : exit_check_failed;
  } catch (const usage_error& error) {
    fmt::print(stderr, "cudapmr_stress: {}\n", error.what());
    return exit_unusable;
  } catch (const std::invalid_argument& error) {
    fmt::print(stderr, "cudapmr_stress: {}\n", error.what());
    return exit_unusable;
  } catch (const cudapmr::cuda_error& error) {
    fmt::print(stderr, "cudapmr_stress: {}\n", error.what());
    return cudapmr::is_no_device_error(error.error()) ? exit_unusable : exit_check_failed;
  } catch (const std::exception& error) {
    fmt::print(stderr, "cudapmr_stress: error: {}\n", error.what());
    return exit_check_failed;
  }
}
