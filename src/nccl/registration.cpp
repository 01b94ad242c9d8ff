// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/nccl/registration.hpp"

#include "cudapmr/nccl/error.hpp"

#include <fmt/format.h>

#include <stdexcept>
#include <utility>

namespace cudapmr {

nccl_registration::nccl_registration(ncclComm_t communicator, void* p, std::size_t bytes) {
  if (communicator == nullptr || p == nullptr || bytes == 0)
    throw std::invalid_argument(fmt::format("nccl_registration: communicator {}, memory {}, {} bytes: each must be "
                                            "non-null and the size above zero",
                                            fmt::ptr(communicator), fmt::ptr(p), bytes));
  check_nccl(ncclCommRegister(communicator, p, bytes, &handle_), "ncclCommRegister", communicator);
  communicator_ = communicator;
}

nccl_registration::nccl_registration(nccl_registration&& other) noexcept
    : communicator_(std::exchange(other.communicator_, nullptr)), handle_(std::exchange(other.handle_, nullptr)) {}

nccl_registration& nccl_registration::operator=(nccl_registration&& other) noexcept {
  if (this != &other) {
    reset();
    communicator_ = std::exchange(other.communicator_, nullptr);
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

void nccl_registration::reset() noexcept {
  if (communicator_ == nullptr) return;
  static_cast<void>(ncclCommDeregister(communicator_, handle_));
  communicator_ = nullptr;
  handle_ = nullptr;
}

}  // namespace cudapmr
