// SPDX-License-Identifier: Apache-2.0
#pragma once
// One process per GPU: the launcher that starts the ranks, and the rank's side
// of handing NCCL's unique id around over cudapmr's ipc_channel.

#include <nccl.h>

#include <filesystem>
#include <string>
#include <vector>

namespace collective {

/// Starts one copy of this program per GPU, rank r on device r, with
/// `rank_arguments` added; passes rank 0's unique id to the other ranks; waits
/// for all, stopping the rest as soon as one fails. Returns the job's exit
/// status: 0 when every rank returned 0, 1 when the worst was 1 (wrong
/// values), 2 otherwise. \throws std::system_error when a rank cannot be
/// started or does not connect.
[[nodiscard]] int launch_process_per_gpu(int gpus, const std::vector<std::string>& rank_arguments);

/// A rank's side: connects to the launcher at `socket`, says which rank it
/// is, and returns the communicator's unique id (made here on rank 0, which
/// hosts NCCL's bootstrap, and sent to the launcher; received on the others).
/// \throws std::system_error, std::runtime_error from the channel; nccl_error.
[[nodiscard]] ncclUniqueId unique_id_through_launcher(const std::filesystem::path& socket, int rank);

}  // namespace collective
