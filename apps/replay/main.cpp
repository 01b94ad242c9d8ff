// SPDX-License-Identifier: Apache-2.0
// replay: plays a logging_adaptor log back against a cudapmr resource, threads
// and order preserved, and prints the peak usage, the time and the failures;
// with --record, writes such a log of a synthetic multi-threaded workload.
#include "command_line.hpp"
#include "replay.hpp"
#include "snapshot_files.hpp"

#include <cudapmr/cudapmr.hpp>
#include <cudapmr/interop/format.hpp>

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr int exit_replayed = 0;
constexpr int exit_refusals = 1;
constexpr int exit_unusable = 2;

enum class resource_kind { device, pinned, managed, host };

struct options {
  std::string log;
  bool record = false;
  resource_kind kind = resource_kind::device;
  int device = 0;
  std::optional<std::size_t> limit;
  bool track = false;
  cudapmr::apps::snapshot_files files;
  replay::workload_options workload;
};

using cudapmr::apps::usage_error;

resource_kind parse_kind(std::string_view text) {
  if (text == "device") return resource_kind::device;
  if (text == "pinned") return resource_kind::pinned;
  if (text == "managed") return resource_kind::managed;
  if (text == "host") return resource_kind::host;
  throw usage_error(fmt::format("--resource {}: expected device, pinned, managed or host", text));
}

/// The options, or exit status 2 and one line for an unusable argument.
options parse_arguments(int argc, char** argv) {
  using cudapmr::apps::add_integer;
  using cudapmr::apps::add_size;
  constexpr auto most = std::numeric_limits<std::size_t>::max();
  options parsed;
  CLI::App app(
      "Replays a cudapmr logging_adaptor log (CSV) against a fresh resource: one thread per logged thread, every "
      "event in the log's order, one stream per logged stream. Prints the peak usage (and the log's own peak), the "
      "pool's reserve, the time and the refused allocations. With --record, runs a synthetic workload through a "
      "logging_adaptor into LOG instead.\nExit status: 0 replayed (or recorded) with no refused allocation, 1 some "
      "allocations were refused, 2 unusable arguments, log or device.",
      "replay");
  cudapmr::apps::add_version(app);
  app.add_option("LOG", parsed.log, "the log to replay")->type_name("LOG");
  app.add_option_function<std::string>(
         "--record", [&](const std::string& text) { parsed.record = true; parsed.log = text; },
         "run the synthetic workload through a logging_adaptor into LOG")
      ->type_name("LOG");
  app.add_option_function<std::string>(
         "--resource", [&](const std::string& text) { parsed.kind = parse_kind(text); },
         "device, pinned, managed or host (default device); the CUDA kinds use a new pool of their own")
      ->type_name("KIND");
  add_integer(app, "--device", parsed.device, 0, 1024, "CUDA device ordinal (default 0)")->type_name("D");
  add_size(app, "--limit", parsed.limit, 0, most, "cap the resource with a limiting_adaptor");
  app.add_flag("--track", parsed.track, "check every free with a tracking_adaptor and count bad ones");
  cudapmr::apps::add_snapshot_options(app, parsed.files, "after the replay");
  add_integer(app, "--threads", parsed.workload.threads, std::size_t{1}, std::size_t{4096},
              "the workload's threads (default 16)");
  add_integer(app, "--allocations", parsed.workload.allocations_per_thread, std::size_t{0}, most,
              "the workload's allocations per thread (default 1000)");
  add_size(app, "--max-bytes", parsed.workload.max_bytes, 1, most, "the workload's largest allocation (default 1MiB)");
  add_integer(app, "--seed", parsed.workload.seed, std::uint64_t{0}, std::numeric_limits<std::uint64_t>::max(),
              "the workload's random seed (default 1)");
  cudapmr::apps::parse_or_exit(app, argc, argv);
  if (parsed.log.empty()) {
    std::fprintf(stderr, "replay: no log given (--help for usage)\n");
    std::exit(exit_unusable);
  }
  return parsed;
}

/// A fresh resource of the chosen kind: a new pool for the CUDA kinds, so
/// that its statistics start from zero.
std::unique_ptr<cudapmr::stream_ordered_resource> make_resource(const options& chosen) {
  if (chosen.kind == resource_kind::host) return std::make_unique<cudapmr::host_memory_resource>();
  if (cudapmr::device::count() == 0) throw usage_error("no CUDA device was found");
  cudapmr::device(chosen.device).set_current();
  switch (chosen.kind) {
    case resource_kind::device:
      return std::make_unique<cudapmr::device_memory_resource>(chosen.device, cudapmr::device_pool_options{});
    case resource_kind::pinned:
      return std::make_unique<cudapmr::pinned_memory_resource>(cudapmr::pinned_pool_options{});
    case resource_kind::managed:
      return std::make_unique<cudapmr::managed_memory_resource>(
          cudapmr::managed_pool_options{.preferred_device = chosen.device});
    case resource_kind::host: break;
  }
  return std::make_unique<cudapmr::host_memory_resource>();
}

/// Managed memory beyond what the GPU has free oversubscribes it, which can
/// stall it: such a run is refused up front.
void require_free_device_memory(const options& chosen, std::size_t bytes, std::string_view what) {
  if (chosen.kind != resource_kind::managed) return;
  if (const std::size_t free_bytes = cudapmr::device(chosen.device).free_memory(); bytes > free_bytes)
    throw usage_error(fmt::format("{} needs up to {} ({} bytes) of managed memory, but device {} has only {} free",
                                  what, cudapmr::human_bytes(bytes), bytes, chosen.device,
                                  cudapmr::human_bytes(free_bytes)));
}

void print_pool(const cudapmr::stream_ordered_resource& resource) {
  if (const auto* pool = dynamic_cast<const cudapmr::pool_resource*>(&resource))
    fmt::print("pool: {}\n", pool->stats());
}

int record(const options& chosen) {
  const replay::workload_options& workload = chosen.workload;
  const std::unique_ptr<cudapmr::stream_ordered_resource> resource = make_resource(chosen);
  require_free_device_memory(chosen, workload.threads * workload.allocations_per_thread * workload.max_bytes,
                             "the workload");
  std::optional<cudapmr::resource_statistics> statistics;
  {
    cudapmr::logging_adaptor logged(*resource, std::filesystem::path(chosen.log));
    cudapmr::statistics_adaptor counted(logged);
    replay::run_workload(counted, workload);
    statistics = counted.statistics();
  }
  fmt::print("recorded: {}: {} allocations from {} threads over {}\n", chosen.log, statistics->allocations.total,
             workload.threads, resource->description());
  fmt::print("peak: {} bytes ({})\n", statistics->bytes.peak, cudapmr::human_bytes(statistics->bytes.peak));
  print_pool(*resource);
  return exit_replayed;
}

int replay_log(const options& chosen) {
  const std::vector<replay::event> events = replay::read_log(std::filesystem::path(chosen.log));
  const std::size_t log_peak = replay::peak_bytes(events);
  const std::unique_ptr<cudapmr::stream_ordered_resource> resource = make_resource(chosen);
  require_free_device_memory(chosen, log_peak, "the log");

  cudapmr::stream_ordered_resource* target = resource.get();
  std::optional<cudapmr::limiting_adaptor> limited;
  if (chosen.limit) target = &limited.emplace(*target, *chosen.limit);
  std::optional<cudapmr::tracking_adaptor> tracked;
  std::optional<cudapmr::history_adaptor> history;
  std::atomic<std::size_t> misuses{0};
  if (chosen.track) {
    target = &tracked.emplace(*target, cudapmr::tracking_options{.on_misuse = [&misuses](const cudapmr::misuse_report& report) {
      if (misuses++ < 10) fmt::print(stderr, "replay: {}\n", report.message);  // the first few are enough
    }});
  }

  // The history of the whole replay (room for three events per logged one), so
  // that the first refusal explains itself and the snapshot holds every event.
  target = &history.emplace(*target,
                             cudapmr::history_options{.capacity = 3 * events.size() + 64, .explained_refusals = 1});

  const replay::result outcome = replay::run(events, *target);
  const double seconds = std::chrono::duration<double>(outcome.elapsed).count();
  fmt::print("log: {}: {} events from {} threads on {} streams\n", chosen.log, outcome.events, outcome.threads,
             outcome.streams);
  fmt::print("resource: {}\n", target->description());
  fmt::print("peak: {} bytes ({}); the log's peak: {} bytes ({})\n", outcome.statistics.bytes.peak,
             cudapmr::human_bytes(outcome.statistics.bytes.peak), log_peak, cudapmr::human_bytes(log_peak));
  print_pool(*resource);
  fmt::print("time: {:.3f} s ({:.2f} us per event)\n", seconds,
             outcome.events == 0 ? 0.0 : seconds * 1e6 / static_cast<double>(outcome.events));
  fmt::print("failures: {} (the log recorded {})\n", outcome.failures, outcome.logged_failures);
  fmt::print("unmatched frees: {}, left outstanding: {}\n", outcome.unmatched_frees, outcome.left_outstanding);
  if (chosen.track) fmt::print("bad frees: {}\n", misuses.load());
  if (!outcome.first_refusal.empty()) fmt::print("first refusal: {}\n", outcome.first_refusal);
  if (chosen.files.any()) {
    const cudapmr::memory_snapshot state = cudapmr::snapshot(*target);
    cudapmr::apps::write_snapshot_files(chosen.files, std::span(&state, 1));
    fmt::print("snapshot: {} events, peak {} bytes\n", state.events.size(), cudapmr::peak_live_bytes(state));
  }
  return outcome.failures == 0 ? exit_replayed : exit_refusals;
}

void report(const char* message) {
  std::fflush(stdout);
  fmt::print(stderr, "replay: {}\n", message);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const options chosen = parse_arguments(argc, argv);
    return chosen.record ? record(chosen) : replay_log(chosen);
  } catch (const cudapmr::out_of_memory& error) {
    report(error.what());
    return exit_refusals;
  } catch (const std::exception& error) {  // usage, the log, the device: nothing to replay
    report(error.what());
    return exit_unusable;
  }
}
