// SPDX-License-Identifier: Apache-2.0
// collective: an all-reduce (sum) over NCCL on every visible GPU, with buffers
// drawn from cudapmr's per-device resources, checked against exact values and
// reported the way nccl-tests' all_reduce_perf reports.
//
// Exit status: 0 every value correct; 1 a wrong value; 2 unusable arguments,
// no usable device, or a CUDA or NCCL failure, with a one-line reason.
#include "all_reduce.hpp"
#include "command_line.hpp"
#include "launcher.hpp"

#include <cudapmr/device.hpp>
#include <cudapmr/error.hpp>
#include <cudapmr/nccl/communicator.hpp>
#include <cudapmr/nccl/error.hpp>

#include <fmt/format.h>

#include <cstdlib>
#include <exception>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

enum class mode_kind { one_process, process_per_gpu, rank };

struct options {
  mode_kind mode = mode_kind::one_process;
  std::optional<int> gpus;
  collective::run_settings settings;
  int rank = -1;
  int ranks = 0;
  std::optional<int> device;
  std::string launcher_socket;  // set by the process-per-gpu launcher for its ranks
};

using cudapmr::apps::usage_error;

/// A size for --min-bytes or --max-bytes: a whole number of floats, up to 1 TiB.
std::size_t parse_float_bytes(std::string_view option, const std::string& text) {
  const std::size_t value = cudapmr::apps::parse_size(option, text, sizeof(float), std::size_t{1} << 40);
  if (value % sizeof(float) != 0)
    throw usage_error(fmt::format("{} {} is not a whole number of floats (4 bytes each)", option, text));
  return value;
}

/// The options, or exit status 2 and one line for an unusable argument.
options parse(int argc, char** argv) {
  using cudapmr::apps::parse_integer;
  options parsed;
  bool mode_given = false;
  CLI::App app(
      "An all-reduce (sum) of floats over NCCL on every visible GPU (or the first N), checked against exact "
      "expected values, timed per size the way nccl-tests does (algbw = bytes / time, busbw = algbw * 2(n-1)/n). "
      "--rank R --ranks N runs as rank R of a job of N ranks started elsewhere (one per GPU, on any number of "
      "nodes); every rank then needs NCCL_COMM_ID=host:port, the address where rank 0 listens.\nExit status: 0 "
      "every value correct; 1 a wrong value; 2 unusable arguments or a failure.",
      "collective");
  cudapmr::apps::add_version(app);
  const auto integer = [&app](const std::string& flag, auto&& store, int low, int high, const std::string& help) {
    app.add_option_function<std::string>(
           flag, [flag, store, low, high](const std::string& text) { store(parse_integer<int>(flag, text, low, high)); },
           help)
        ->type_name("N");
  };
  app.add_option_function<std::string>(
         "--mode",
         [&](const std::string& value) {
           if (value == "one-process") parsed.mode = mode_kind::one_process;
           else if (value == "process-per-gpu") parsed.mode = mode_kind::process_per_gpu;
           else throw usage_error(fmt::format("--mode takes one-process or process-per-gpu, not '{}'", value));
           mode_given = true;
         },
         "one-process: one process drives every GPU (ncclCommInitAll), the default; process-per-gpu: one process "
         "per GPU, rank 0's NCCL unique id reaching the others over a Unix socket in a private directory")
      ->type_name("MODE");
  integer("--gpus", [&](int value) { parsed.gpus = value; }, 1, 1 << 16, "use the first N GPUs");
  app.add_option_function<std::string>(
         "--min-bytes", [&](const std::string& text) { parsed.settings.min_bytes = parse_float_bytes("--min-bytes", text); },
         "smallest size (default 1MiB)")
      ->type_name("SIZE");
  app.add_option_function<std::string>(
         "--max-bytes", [&](const std::string& text) { parsed.settings.max_bytes = parse_float_bytes("--max-bytes", text); },
         "largest size (default 1GiB); sizes double from the smallest")
      ->type_name("SIZE");
  integer("--iterations", [&](int value) { parsed.settings.iterations = value; }, 1, 1 << 20,
          "timed all-reduces per size (default 20)");
  integer("--warmup", [&](int value) { parsed.settings.warmup = value; }, 0, 1 << 20,
          "untimed all-reduces before them (default 5)");
  app.add_option_function<std::string>(
         "--resource",
         [&](const std::string& value) {
           if (value == "nccl") parsed.settings.source = collective::buffer_source::nccl;
           else if (value == "device") parsed.settings.source = collective::buffer_source::device;
           else throw usage_error(fmt::format("--resource takes nccl or device, not '{}'", value));
         },
         "buffers from nccl_memory_resource (default) or the device's default pool")
      ->type_name("nccl|device");
  app.add_flag_callback("--no-register", [&] { parsed.settings.register_buffers = false; },
                        "do not register the buffers with the communicator");
  integer("--rank", [&](int value) { parsed.rank = value; }, 0, 1 << 20, "run as rank R of --ranks");
  integer("--ranks", [&](int value) { parsed.ranks = value; }, 1, 1 << 20, "the job's ranks");
  integer("--device", [&](int value) { parsed.device = value; }, 0, 1 << 16,
          "the GPU of this rank (default: R modulo the visible GPUs)");
  app.add_option("--launcher-socket", parsed.launcher_socket, "set by the process-per-gpu launcher for its ranks")
      ->group("");  // internal: not in --help
  cudapmr::apps::parse_or_exit(app, argc, argv);
  if (parsed.settings.min_bytes > parsed.settings.max_bytes)
    throw usage_error(fmt::format("--min-bytes {} exceeds --max-bytes {}", parsed.settings.min_bytes,
                                  parsed.settings.max_bytes));
  const bool rank_given = parsed.rank >= 0 || parsed.ranks > 0;
  if (rank_given) {
    if (parsed.rank < 0 || parsed.ranks == 0) throw usage_error("--rank and --ranks go together");
    if (parsed.rank >= parsed.ranks)
      throw usage_error(fmt::format("--rank {} is out of range for --ranks {}", parsed.rank, parsed.ranks));
    if (mode_given || parsed.gpus) throw usage_error("--rank runs one rank; --mode and --gpus do not apply");
    parsed.mode = mode_kind::rank;
  } else if (parsed.device || !parsed.launcher_socket.empty()) {
    throw usage_error("--device and --launcher-socket go with --rank");
  }
  return parsed;
}

/// The number of visible GPUs. \throws cuda_error ("no CUDA device was found") where there is none.
int visible_gpus() {
  static_cast<void>(cudapmr::device::current());
  return cudapmr::device::count();
}

/// The GPUs a one-node run uses: all visible ones, or the first --gpus.
int gpus_to_use(const options& chosen) {
  const int visible = visible_gpus();
  if (chosen.gpus && *chosen.gpus > visible)
    throw usage_error(fmt::format("--gpus {}: only {} GPU(s) are visible", *chosen.gpus, visible));
  return chosen.gpus.value_or(visible);
}

/// The settings, as arguments for the ranks the launcher starts.
std::vector<std::string> settings_arguments(const collective::run_settings& settings) {
  std::vector<std::string> arguments = {
      "--min-bytes",  std::to_string(settings.min_bytes), "--max-bytes", std::to_string(settings.max_bytes),
      "--iterations", std::to_string(settings.iterations), "--warmup",   std::to_string(settings.warmup),
      "--resource",   settings.source == collective::buffer_source::nccl ? "nccl" : "device"};
  if (!settings.register_buffers) arguments.emplace_back("--no-register");
  return arguments;
}

void print_preamble(const char* layout, int ranks, const collective::run_settings& settings, bool registered) {
  int version = 0;
  cudapmr::check_nccl(ncclGetVersion(&version), "ncclGetVersion");
  fmt::print("# collective: all-reduce (sum) of float, {} rank(s), {}\n", ranks, layout);
  fmt::print("# NCCL {}.{}.{}; buffers from {}{}; sizes {} to {} bytes, {} warmup + {} timed iterations each\n",
             version / 10000, version / 100 % 100, version % 100,
             settings.source == collective::buffer_source::nccl ? "nccl_memory_resource" : "default_device_resource",
             registered ? ", registered with the communicator" : "", settings.min_bytes, settings.max_bytes,
             settings.warmup, settings.iterations);
  std::fflush(stdout);
}

int finish(const std::vector<collective::size_result>& results, int ranks, bool report) {
  if (report) collective::print_report(stdout, results, ranks);
  return collective::all_correct(results) ? 0 : 1;
}

int run_one_process(const options& chosen) {
  const int gpus = gpus_to_use(chosen);
  std::vector<int> devices(static_cast<std::size_t>(gpus));
  std::iota(devices.begin(), devices.end(), 0);
  std::vector<collective::rank_context> ranks;
  for (cudapmr::nccl_communicator& communicator : cudapmr::nccl_communicator::create_all(devices))
    ranks.emplace_back(std::move(communicator), chosen.settings);
  print_preamble("one process driving every GPU", gpus, chosen.settings, ranks.front().buffers_registered());
  for (const collective::rank_context& rank : ranks) fmt::print("{}\n", collective::describe_rank(rank));
  return finish(collective::run_all_reduce(ranks, chosen.settings), gpus, true);
}

int run_rank(const options& chosen) {
  const bool launched = !chosen.launcher_socket.empty();
  if (!launched && chosen.ranks > 1 && std::getenv("NCCL_COMM_ID") == nullptr)
    throw usage_error("--ranks above 1 without a launcher needs NCCL_COMM_ID=host:port (where rank 0 listens) on "
                      "every rank");
  const int device = chosen.device.value_or(chosen.rank % visible_gpus());
  // With NCCL_COMM_ID set, every rank makes the same id on its own.
  const ncclUniqueId id = launched ? collective::unique_id_through_launcher(chosen.launcher_socket, chosen.rank)
                                   : cudapmr::nccl_communicator::make_unique_id();
  std::vector<collective::rank_context> ranks;
  ranks.emplace_back(cudapmr::nccl_communicator(id, chosen.ranks, chosen.rank, device), chosen.settings);
  const bool first = chosen.rank == 0;
  if (first)
    print_preamble(chosen.launcher_socket.empty() ? "one process per rank" : "one process per GPU", chosen.ranks,
                   chosen.settings, ranks.front().buffers_registered());
  fmt::print("{}\n", collective::describe_rank(ranks.front()));
  std::fflush(stdout);
  std::vector<collective::size_result> results = collective::run_all_reduce(ranks, chosen.settings);
  collective::combine_across_ranks(results, ranks.front());
  return finish(results, chosen.ranks, first);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const options chosen = parse(argc, argv);
    switch (chosen.mode) {
      case mode_kind::one_process: return run_one_process(chosen);
      case mode_kind::process_per_gpu: {
        const int gpus = gpus_to_use(chosen);
        return collective::launch_process_per_gpu(gpus, settings_arguments(chosen.settings));
      }
      case mode_kind::rank: return run_rank(chosen);
    }
  } catch (const usage_error& error) {
    fmt::print(stderr, "collective: {} (--help for usage)\n", error.what());
  } catch (const std::exception& error) {
    fmt::print(stderr, "collective: {}\n", error.what());
  }
  return 2;
}
