// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file nccl/communicator.hpp
/// An owned NCCL communicator (part of cudapmr::nccl).

#include <nccl.h>

#include <span>
#include <vector>

namespace cudapmr {

/// One rank's NCCL communicator, destroyed with it (ncclCommDestroy). Move-only.
///
/// Two ways to make one: `create_all` for one process that drives several
/// GPUs; or, with one process per GPU (on one node or many), rank 0 calls
/// `make_unique_id`, sends the id to every other rank (ipc_channel within a
/// node; any transport across nodes), and every rank constructs its own.
class nccl_communicator final {
 public:
  /// A new communicator id. The calling process hosts NCCL's bootstrap for it,
  /// so it must be (and stay alive as) the process of rank 0. With
  /// NCCL_COMM_ID=host:port set, every rank gets the same id on its own.
  /// \throws nccl_error.
  [[nodiscard]] static ncclUniqueId make_unique_id();

  /// One communicator per device of `devices`, all driven by this process
  /// (ncclCommInitAll): rank i runs on devices[i].
  /// \throws std::invalid_argument for no devices or a bad ordinal; nccl_error.
  [[nodiscard]] static std::vector<nccl_communicator> create_all(std::span<const int> devices);

  /// Joins communicator `id` as `rank` of `ranks`, on `device`; blocks until
  /// every rank has joined (ncclCommInitRank).
  /// \throws std::invalid_argument for a rank out of range or a bad ordinal; nccl_error.
  nccl_communicator(const ncclUniqueId& id, int ranks, int rank, int device);
  /// Destroys the communicator (after its queued operations). Never throws.
  ~nccl_communicator();

  nccl_communicator(nccl_communicator&& other) noexcept;
  nccl_communicator& operator=(nccl_communicator&& other) noexcept;
  nccl_communicator(const nccl_communicator&) = delete;
  nccl_communicator& operator=(const nccl_communicator&) = delete;

  [[nodiscard]] ncclComm_t get() const noexcept { return communicator_; }
  [[nodiscard]] int rank() const noexcept { return rank_; }
  /// The number of ranks.
  [[nodiscard]] int size() const noexcept { return size_; }
  /// The CUDA device this rank runs on.
  [[nodiscard]] int device() const noexcept { return device_; }

 private:
  /// Adopts `communicator` and reads its rank, size and device. \throws nccl_error.
  explicit nccl_communicator(ncclComm_t communicator);

  ncclComm_t communicator_ = nullptr;
  int rank_ = -1;
  int size_ = 0;
  int device_ = -1;
};

}  // namespace cudapmr
