// SPDX-License-Identifier: Apache-2.0
#pragma once
// The measured all-reduce: the ranks one process drives, the run over sizes,
// and the nccl-tests style report.

#include <cudapmr/buffer.hpp>
#include <cudapmr/nccl/communicator.hpp>
#include <cudapmr/nccl/registration.hpp>
#include <cudapmr/stream.hpp>
#include <cudapmr/stream_ordered_resource.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace collective {

/// Where each rank's buffers come from.
enum class buffer_source {
  nccl,    ///< cudapmr::nccl_memory_resource (ncclMemAlloc), registered with the communicator
  device,  ///< the device's default pool, cudapmr::default_device_resource
};

struct run_settings {
  std::size_t min_bytes = std::size_t{1} << 20;
  std::size_t max_bytes = std::size_t{1} << 30;
  int iterations = 20;
  int warmup = 5;
  buffer_source source = buffer_source::nccl;
  bool register_buffers = true;
};

/// One size's measurement: times are per operation, `wrong` counts elements
/// that differ from the exact sum (over every rank).
struct size_result {
  std::uint64_t bytes = 0;
  double out_of_place_us = 0;
  double in_place_us = 0;
  std::uint64_t out_of_place_wrong = 0;
  std::uint64_t in_place_wrong = 0;
};

/// One rank driven by this process: its communicator, its device's resource,
/// a stream, and send and receive buffers of the largest size (drawn from the
/// resource, registered with the communicator where asked).
class rank_context {
 public:
  /// \throws cudapmr::out_of_memory, cudapmr::cuda_error, cudapmr::nccl_error.
  rank_context(cudapmr::nccl_communicator communicator, const run_settings& settings);

  [[nodiscard]] const cudapmr::nccl_communicator& communicator() const noexcept { return communicator_; }
  [[nodiscard]] bool buffers_registered() const noexcept { return send_registration_.is_registered(); }

  /// Queues this rank's part of one all-reduce of `count` floats (inside a group when one process drives several ranks).
  void queue_all_reduce(std::size_t count, bool in_place);
  /// Resets the first `count` received elements to this rank's contribution, for an in-place run.
  void restore_receive(std::size_t count);
  /// The number of the first `count` received elements that differ from the exact sum; synchronizes.
  [[nodiscard]] std::uint64_t count_wrong(std::size_t count);
  void synchronize() const { stream_.synchronize(); }
  [[nodiscard]] cudapmr::stream_ref stream() const noexcept { return stream_; }

 private:
  cudapmr::nccl_communicator communicator_;  // first: destroyed last
  std::unique_ptr<cudapmr::stream_ordered_resource> owned_resource_;
  cudapmr::stream_ordered_resource* resource_;
  cudapmr::stream stream_;
  cudapmr::buffer<float> send_;
  cudapmr::buffer<float> receive_;
  cudapmr::buffer<unsigned long long> wrong_;
  cudapmr::nccl_registration send_registration_;
  cudapmr::nccl_registration receive_registration_;
};

/// The sizes a run covers: `min_bytes` doubling up to `max_bytes`.
[[nodiscard]] std::vector<std::size_t> sizes_of(const run_settings& settings);

/// Times and checks out-of-place and in-place all-reduces at every size over
/// the ranks this process drives (all of them, or one of many processes').
[[nodiscard]] std::vector<size_result> run_all_reduce(std::span<rank_context> ranks, const run_settings& settings);

/// Makes every rank's results the job's: the slowest time and the sum of
/// wrong elements over all ranks (an NCCL all-reduce over `rank`'s communicator).
void combine_across_ranks(std::vector<size_result>& results, rank_context& rank);

/// "#  Rank  0 Pid 1234 on host device  0 [NVIDIA H200]".
[[nodiscard]] std::string describe_rank(const rank_context& rank);

/// Prints the table the way nccl-tests' all_reduce_perf does, and a verdict.
void print_report(std::FILE* out, std::span<const size_result> results, int total_ranks);

/// Whether every element of every size was right.
[[nodiscard]] bool all_correct(std::span<const size_result> results);

}  // namespace collective
