// SPDX-License-Identifier: Apache-2.0
#include "launcher.hpp"

#include <cudapmr/multiprocess/ipc_channel.hpp>
#include <cudapmr/nccl/communicator.hpp>
#include <cudapmr/multiprocess/process.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <thread>

namespace collective {
namespace {

using namespace std::chrono_literals;

/// How long ranks may take to start (a process per GPU, each initializing CUDA) and connect.
constexpr std::chrono::milliseconds connect_timeout = 120s;

/// The job's status from its ranks': 0, 1 (wrong values) or 2.
int job_status(const std::vector<int>& statuses) {
  const int worst = *std::max_element(statuses.begin(), statuses.end());
  return worst <= 1 ? worst : 2;
}

}  // namespace

int launch_process_per_gpu(int gpus, const std::vector<std::string>& rank_arguments) {
  cudapmr::ipc_listener listener;
  std::vector<cudapmr::child_process> ranks;
  for (int rank = 0; rank < gpus; ++rank) {
    std::vector<std::string> arguments = {"--rank",   std::to_string(rank), "--ranks", std::to_string(gpus),
                                          "--device", std::to_string(rank), "--launcher-socket",
                                          listener.socket_path().string()};
    arguments.insert(arguments.end(), rank_arguments.begin(), rank_arguments.end());
    ranks.emplace_back(cudapmr::current_executable(), arguments);
  }
  const auto all_running = [&] {
    return std::none_of(ranks.begin(), ranks.end(), [](cudapmr::child_process& rank) { return rank.try_wait(); });
  };

  std::vector<std::optional<cudapmr::ipc_channel>> channels(static_cast<std::size_t>(gpus));
  for (int connected = 0; connected < gpus; ++connected) {
    cudapmr::ipc_channel channel = listener.accept(connect_timeout, all_running);
    const int rank = channel.receive_value<int>();
    if (rank < 0 || rank >= gpus || channels[static_cast<std::size_t>(rank)])
      throw std::runtime_error(fmt::format("a process announced rank {}, which is out of range or taken", rank));
    channels[static_cast<std::size_t>(rank)] = std::move(channel);
  }
  const auto id = channels.front()->receive_value<ncclUniqueId>();
  for (std::size_t rank = 1; rank < channels.size(); ++rank) channels[rank]->send_value(id);

  // Wait for every rank.
  std::vector<int> statuses(ranks.size(), 0);
  std::vector<bool> ended(ranks.size(), false);
  while (std::find(ended.begin(), ended.end(), false) != ended.end()) {
    for (std::size_t rank = 0; rank < ranks.size(); ++rank) {
      if (ended[rank]) continue;
      const std::optional<int> status = ranks[rank].try_wait();
      if (!status) continue;
      ended[rank] = true;
      statuses[rank] = *status;
      // Wrong values end every rank alike (their counts are shared); anything worse may leave the others waiting.
      if (*status > 1) {
        fmt::print(stderr, "collective: rank {} ended with status {}; stopping the other ranks\n", rank, *status);
        for (cudapmr::child_process& other : ranks) other.kill();
      }
    }
    std::this_thread::sleep_for(10ms);
  }
  return job_status(statuses);
}

ncclUniqueId unique_id_through_launcher(const std::filesystem::path& socket, int rank) {
  cudapmr::ipc_channel launcher = cudapmr::ipc_channel::connect(socket, connect_timeout);
  launcher.send_value(rank);
  if (rank != 0) return launcher.receive_value<ncclUniqueId>();
  const ncclUniqueId id = cudapmr::nccl_communicator::make_unique_id();
  launcher.send_value(id);
  return id;
}

}  // namespace collective
