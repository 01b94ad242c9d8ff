// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/nccl/communicator.hpp"

#include "cudapmr/device.hpp"
#include "cudapmr/nccl/error.hpp"

#include <fmt/format.h>

#include <memory>

#include <stdexcept>
#include <utility>

namespace cudapmr {
namespace {

/// Destroys a communicator that could not be adopted. Never copied: a copy's
/// destructor would destroy the communicator the original still holds.
struct communicator_guard {
  explicit communicator_guard(ncclComm_t held) noexcept : communicator(held) {}
  communicator_guard(const communicator_guard&) = delete;
  communicator_guard& operator=(const communicator_guard&) = delete;
  ~communicator_guard() {
    if (communicator != nullptr) static_cast<void>(ncclCommDestroy(communicator));
  }
  ncclComm_t communicator;
};

}  // namespace

ncclUniqueId nccl_communicator::make_unique_id() {
  ncclUniqueId id{};
  check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  return id;
}

std::vector<nccl_communicator> nccl_communicator::create_all(std::span<const int> devices) {
  if (devices.empty()) throw std::invalid_argument("nccl_communicator::create_all: no devices");
  for (const int device : devices) detail::validate_device_ordinal(device);
  std::vector<ncclComm_t> handles(devices.size(), nullptr);
  check_nccl(ncclCommInitAll(handles.data(), static_cast<int>(devices.size()), devices.data()),
                     "ncclCommInitAll");
  std::vector<std::unique_ptr<communicator_guard>> guards;
  guards.reserve(handles.size());
  for (ncclComm_t handle : handles) guards.push_back(std::make_unique<communicator_guard>(handle));
  std::vector<nccl_communicator> communicators;
  communicators.reserve(handles.size());
  for (const auto& guard : guards) {
    communicators.push_back(nccl_communicator(guard->communicator));
    guard->communicator = nullptr;
  }
  return communicators;
}

nccl_communicator::nccl_communicator(const ncclUniqueId& id, int ranks, int rank, int device) {
  if (ranks < 1 || rank < 0 || rank >= ranks)
    throw std::invalid_argument(fmt::format("nccl_communicator: rank {} of {} ranks is out of range", rank, ranks));
  detail::validate_device_ordinal(device);
  const detail::scoped_device guard(device);  // a rank runs on the device current at its creation
  ncclComm_t handle = nullptr;
  check_nccl(ncclCommInitRank(&handle, ranks, id, rank), "ncclCommInitRank");
  communicator_guard owned(handle);
  *this = nccl_communicator(handle);
  owned.communicator = nullptr;
}

nccl_communicator::nccl_communicator(ncclComm_t communicator) : communicator_(communicator) {
  check_nccl(ncclCommUserRank(communicator, &rank_), "ncclCommUserRank", communicator);
  check_nccl(ncclCommCount(communicator, &size_), "ncclCommCount", communicator);
  check_nccl(ncclCommCuDevice(communicator, &device_), "ncclCommCuDevice", communicator);
}

nccl_communicator::~nccl_communicator() {
  if (communicator_ != nullptr) static_cast<void>(ncclCommDestroy(communicator_));
}

nccl_communicator::nccl_communicator(nccl_communicator&& other) noexcept
    : communicator_(std::exchange(other.communicator_, nullptr)),
      rank_(std::exchange(other.rank_, -1)),
      size_(std::exchange(other.size_, 0)),
      device_(std::exchange(other.device_, -1)) {}

nccl_communicator& nccl_communicator::operator=(nccl_communicator&& other) noexcept {
  if (this != &other) {
    nccl_communicator released(std::move(*this));
    communicator_ = std::exchange(other.communicator_, nullptr);
    rank_ = std::exchange(other.rank_, -1);
    size_ = std::exchange(other.size_, 0);
    device_ = std::exchange(other.device_, -1);
  }
  return *this;
}

}  // namespace cudapmr
