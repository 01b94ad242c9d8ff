// SPDX-License-Identifier: Apache-2.0
// cudapmr_stress: random allocations, frees, copies, fills and kernels from
// many threads over every resource and adaptor stack, each allocation's
// pattern checked before it is freed, every counter balanced at the end.
#include "command_line.hpp"
#include "stress.hpp"

#include <cudapmr/error.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace {

constexpr int exit_passed = 0;
constexpr int exit_check_failed = 1;
constexpr int exit_unusable = 2;

/// The options, or exit status 2 and one line for an unusable argument.
stress::options parse_arguments(int argc, char** argv) {
  using cudapmr::apps::add_integer;
  using cudapmr::apps::add_size;
  stress::options chosen;
  CLI::App app(
      "Random allocations (of random size and alignment), frees, copies, fills and kernels from T threads over S "
      "streams, across the device, pinned, managed and host resources, caching_resource over each, and every "
      "adaptor stacked over each. One stream-ordered free in four goes to another stream, ordered by an event, as a "
      "consumer stream's would; one operation in a thousand captures a graph that allocates from a device target, "
      "stamps, checks and frees, and launches it twice. Each live allocation holds a pattern checked before it is "
      "freed; at the end every counter must balance and every pool hold no used memory.\nExit status: 0 all checks "
      "passed, 1 a check failed, 2 unusable arguments or no GPU.",
      "cudapmr_stress");
  cudapmr::apps::add_version(app);
  constexpr auto most = std::numeric_limits<std::uint64_t>::max();
  add_integer(app, "--operations", chosen.operations, std::uint64_t{1}, most, "random operations in all (default 1000000)");
  add_integer(app, "--threads", chosen.threads, 1u, 1024u, "threads (default 16)");
  add_integer(app, "--streams", chosen.streams, 1u, 1024u, "streams the threads share (default 4)");
  add_size(app, "--max-bytes", chosen.max_bytes, 1, std::size_t{1} << 30, "the largest allocation (default 1MiB)");
  add_integer(app, "--max-live", chosen.max_live, std::size_t{1}, std::numeric_limits<std::size_t>::max(),
              "the most allocations a thread holds at once (default 64)");
  add_integer(app, "--seed", chosen.seed, std::uint64_t{1}, most, "seed of the random choices (default 1)");
  app.add_flag("--host-only", chosen.host_only, "the host resource and adaptors over it only: no GPU needed");
  app.add_option("--targets", chosen.targets,
                 "only these targets, by name: host, device, pinned or managed alone, with +caching (host+caching) "
                 "or with +adaptors (default all)")
      ->delimiter(',');
  app.add_option("--trace", chosen.trace_path,
                 "write every step (allocations, frees, stamps, checks, copies, fills, kernels, a graph's allocation "
                 "and free) with its time, thread, target, pointer, bytes and stream to this file");
  cudapmr::apps::parse_or_exit(app, argc, argv);
  // On a terminal, a progress line that the next one overwrites.
  if (::isatty(STDERR_FILENO) == 1)
    chosen.on_progress = [](std::uint64_t done, std::uint64_t total) {
      std::fprintf(stderr, "\rcudapmr_stress: %llu of %llu operations (%.0f %%)", static_cast<unsigned long long>(done),
                   static_cast<unsigned long long>(total), 100.0 * static_cast<double>(done) / static_cast<double>(total));
      std::fflush(stderr);
    };
  return chosen;
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
  const stress::options chosen = parse_arguments(argc, argv);
  try {
    const stress::report result = stress::run(chosen);
    if (chosen.on_progress) std::fputs("\r\033[K", stderr);  // the progress line goes
    print(chosen, result);
    return result.failure_count == 0 ? exit_passed : exit_check_failed;
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
