// SPDX-License-Identifier: Apache-2.0
#include "all_reduce.hpp"

#include "kernels.hpp"

#include <cudapmr/device.hpp>
#include <cudapmr/device_memory_resource.hpp>
#include <cudapmr/error.hpp>
#include <cudapmr/nccl/error.hpp>
#include <cudapmr/nccl/memory_resource.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <limits>

namespace collective {
namespace {

std::unique_ptr<cudapmr::stream_ordered_resource> make_owned_resource(buffer_source source, int device) {
  if (source == buffer_source::nccl) return std::make_unique<cudapmr::nccl_memory_resource>(device);
  return nullptr;  // the default pool lives on its own
}

/// Runs `operation` over every rank (one NCCL group, so that one thread may
/// drive several ranks) and waits for all of them.
template <class Operation>
void on_every_rank(std::span<rank_context> ranks, Operation operation) {
  cudapmr::check_nccl(ncclGroupStart(), "ncclGroupStart");
  for (rank_context& rank : ranks) operation(rank);
  cudapmr::check_nccl(ncclGroupEnd(), "ncclGroupEnd");
}

void synchronize_all(std::span<rank_context> ranks) {
  for (const rank_context& rank : ranks) rank.synchronize();
}

/// Microseconds per all-reduce of `count` floats, after `warmup` untimed ones.
double time_all_reduce(std::span<rank_context> ranks, std::size_t count, bool in_place, const run_settings& settings) {
  const auto one = [&](rank_context& rank) { rank.queue_all_reduce(count, in_place); };
  for (int i = 0; i < settings.warmup; ++i) on_every_rank(ranks, one);
  synchronize_all(ranks);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < settings.iterations; ++i) on_every_rank(ranks, one);
  synchronize_all(ranks);
  const std::chrono::duration<double, std::micro> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / settings.iterations;
}

std::uint64_t count_wrong_everywhere(std::span<rank_context> ranks, std::size_t count) {
  std::uint64_t wrong = 0;
  for (rank_context& rank : ranks) wrong += rank.count_wrong(count);
  return wrong;
}

/// GB/s as nccl-tests counts them: 10^9 bytes per second.
double gigabytes_per_second(std::uint64_t bytes, double microseconds) {
  return microseconds > 0 ? static_cast<double>(bytes) / microseconds / 1e3 : 0.0;
}

/// nccl-tests' bus bandwidth factor for all-reduce: each byte crosses 2(n-1)/n links.
double bus_factor(int ranks) { return 2.0 * (ranks - 1) / ranks; }

}  // namespace

// ---- rank_context -------------------------------------------------------------

rank_context::rank_context(cudapmr::nccl_communicator communicator, const run_settings& settings)
    : communicator_(std::move(communicator)),
      owned_resource_(make_owned_resource(settings.source, communicator_.device())),
      resource_(owned_resource_ ? owned_resource_.get()
                                : &cudapmr::default_device_resource(communicator_.device())),
      stream_(communicator_.device()),
      send_(*resource_, settings.max_bytes / sizeof(float), stream_),
      receive_(*resource_, settings.max_bytes / sizeof(float), stream_),
      wrong_(cudapmr::default_device_resource(communicator_.device()), 1, stream_) {
  cudapmr::device(communicator_.device()).set_current();  // kernels launch on the current device
  fill_rank_values(send_.data(), send_.size(), communicator_.rank(), stream_.get());
  // Pool memory gains nothing from registration; NCCL's own memory does.
  if (settings.register_buffers && settings.source == buffer_source::nccl) {
    send_registration_ = cudapmr::nccl_registration(communicator_.get(), send_);
    receive_registration_ = cudapmr::nccl_registration(communicator_.get(), receive_);
  }
  stream_.synchronize();
}

void rank_context::queue_all_reduce(std::size_t count, bool in_place) {
  const float* source = in_place ? receive_.data() : send_.data();
  cudapmr::check_nccl(
      ncclAllReduce(source, receive_.data(), count, ncclFloat, ncclSum, communicator_.get(), stream_.get()),
      "ncclAllReduce", communicator_.get());
}

void rank_context::restore_receive(std::size_t count) {
  CUDAPMR_CHECK(cudaMemcpyAsync(receive_.data(), send_.data(), count * sizeof(float), cudaMemcpyDeviceToDevice,
                                stream_.get()));
}

std::uint64_t rank_context::count_wrong(std::size_t count) {
  wrong_.fill(0, stream_);
  cudapmr::device(communicator_.device()).set_current();  // kernels launch on the current device
  count_wrong_sums(receive_.data(), count, communicator_.size(), wrong_.data(), stream_.get());
  unsigned long long wrong = 0;
  wrong_.copy_to(std::span<unsigned long long>(&wrong, 1), stream_);
  stream_.synchronize();
  return wrong;
}

// ---- the run --------------------------------------------------------------------

std::vector<std::size_t> sizes_of(const run_settings& settings) {
  std::vector<std::size_t> sizes;
  for (std::size_t bytes = settings.min_bytes; bytes <= settings.max_bytes; bytes *= 2) {
    sizes.push_back(bytes);
    if (bytes > std::numeric_limits<std::size_t>::max() / 2) break;
  }
  return sizes;
}

std::vector<size_result> run_all_reduce(std::span<rank_context> ranks, const run_settings& settings) {
  std::vector<size_result> results;
  for (const std::size_t bytes : sizes_of(settings)) {
    const std::size_t count = bytes / sizeof(float);
    size_result result{.bytes = bytes};

    result.out_of_place_us = time_all_reduce(ranks, count, false, settings);
    result.out_of_place_wrong = count_wrong_everywhere(ranks, count);

    // Timed in-place runs keep adding up; a fresh run from the contributions is checked.
    for (rank_context& rank : ranks) rank.restore_receive(count);
    result.in_place_us = time_all_reduce(ranks, count, true, settings);
    for (rank_context& rank : ranks) rank.restore_receive(count);
    on_every_rank(ranks, [&](rank_context& rank) { rank.queue_all_reduce(count, true); });
    result.in_place_wrong = count_wrong_everywhere(ranks, count);
    results.push_back(result);
  }
  return results;
}

void combine_across_ranks(std::vector<size_result>& results, rank_context& rank) {
  const std::size_t sizes = results.size();
  std::vector<double> times;
  std::vector<std::uint64_t> wrong;
  for (const size_result& result : results) {
    times.insert(times.end(), {result.out_of_place_us, result.in_place_us});
    wrong.insert(wrong.end(), {result.out_of_place_wrong, result.in_place_wrong});
  }
  const int device = rank.communicator().device();
  cudapmr::buffer<double> device_times(cudapmr::default_device_resource(device), times.size(), rank.stream());
  cudapmr::buffer<std::uint64_t> device_wrong(cudapmr::default_device_resource(device), wrong.size(), rank.stream());
  device_times.copy_from(std::span<const double>(times), rank.stream());
  device_wrong.copy_from(std::span<const std::uint64_t>(wrong), rank.stream());
  ncclComm_t communicator = rank.communicator().get();
  cudapmr::check_nccl(ncclGroupStart(), "ncclGroupStart");
  cudapmr::check_nccl(ncclAllReduce(device_times.data(), device_times.data(), times.size(), ncclFloat64,
                                            ncclMax, communicator, rank.stream().get()),
                              "ncclAllReduce (slowest time)", communicator);
  cudapmr::check_nccl(ncclAllReduce(device_wrong.data(), device_wrong.data(), wrong.size(), ncclUint64,
                                            ncclSum, communicator, rank.stream().get()),
                              "ncclAllReduce (wrong elements)", communicator);
  cudapmr::check_nccl(ncclGroupEnd(), "ncclGroupEnd");
  device_times.copy_to(std::span<double>(times), rank.stream());
  device_wrong.copy_to(std::span<std::uint64_t>(wrong), rank.stream());
  rank.synchronize();
  for (std::size_t i = 0; i < sizes; ++i) {
    results[i].out_of_place_us = times[2 * i];
    results[i].in_place_us = times[2 * i + 1];
    results[i].out_of_place_wrong = wrong[2 * i];
    results[i].in_place_wrong = wrong[2 * i + 1];
  }
}

// ---- the report -------------------------------------------------------------------

std::string describe_rank(const rank_context& rank) {
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
  const int device = rank.communicator().device();
  return fmt::format("#  Rank {:2} Pid {:6} on {:>10} device {:2} [{}]", rank.communicator().rank(), ::getpid(),
                     host.data(), device, cudapmr::device(device).name());
}

bool all_correct(std::span<const size_result> results) {
  return std::all_of(results.begin(), results.end(), [](const size_result& result) {
    return result.out_of_place_wrong == 0 && result.in_place_wrong == 0;
  });
}

void print_report(std::FILE* out, std::span<const size_result> results, int total_ranks) {
  // Columns as nccl-tests prints them; the out-of-place block starts at column 50.
  const auto header = [out](auto... cells) {
    std::string line = fmt::format("# {:>10}  {:>12}  {:>6}  {:>6}  {:>4}  {:>9}  {:>7}  {:>7}  {:>6}  {:>9}  {:>7}  {:>7}  {:>6}",
                                   cells...);
    line.erase(line.find_last_not_of(' ') + 1);
    fmt::print(out, "{}\n", line);
  };
  fmt::print(out, "#\n#{:49}{:<37}{}\n", "", "out-of-place", "in-place");
  header("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
         "#wrong");
  header("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  double bus_total = 0;
  std::uint64_t wrong_total = 0;
  for (const size_result& result : results) {
    const double out_algbw = gigabytes_per_second(result.bytes, result.out_of_place_us);
    const double in_algbw = gigabytes_per_second(result.bytes, result.in_place_us);
    const double factor = bus_factor(total_ranks);
    fmt::print(out,
               "  {:>10}  {:>12}  {:>6}  {:>6}  {:>4}  {:9.2f}  {:7.2f}  {:7.2f}  {:>6}  {:9.2f}  {:7.2f}  {:7.2f}  {:>6}\n",
               result.bytes, result.bytes / sizeof(float), "float", "sum", -1, result.out_of_place_us, out_algbw,
               out_algbw * factor, result.out_of_place_wrong, result.in_place_us, in_algbw, in_algbw * factor,
               result.in_place_wrong);
    bus_total += (out_algbw + in_algbw) * factor;
    wrong_total += result.out_of_place_wrong + result.in_place_wrong;
  }
  fmt::print(out, "# Out of bounds values : {} {}\n", wrong_total, wrong_total == 0 ? "OK" : "FAILED");
  fmt::print(out, "# Avg bus bandwidth    : {:.3f}\n#\n",
             results.empty() ? 0.0 : bus_total / (2.0 * static_cast<double>(results.size())));
  fmt::print(out, "{}\n", wrong_total == 0 ? "All-reduce verified: every element of every size is the exact sum."
                                           : "All-reduce FAILED: some elements differ from the exact sum.");
  std::fflush(out);
}

}  // namespace collective
