// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file nccl/registration.hpp
/// A buffer registered with an NCCL communicator (part of cudapmr::nccl).

#include "cudapmr/buffer.hpp"

#include <nccl.h>

#include <cstddef>

namespace cudapmr {

/// Registers memory with a communicator (ncclCommRegister), so that NCCL may
/// use it in place, with no copy through its internal buffers, on the paths
/// that support it; deregisters it on destruction. Memory from
/// nccl_memory_resource suits every such path. Registration is synchronous.
/// The memory and the communicator must outlive the registration: declare it
/// after both. Move-only.
class nccl_registration final {
 public:
  /// Registers nothing.
  nccl_registration() noexcept = default;
  /// Registers [p, p + bytes) with `communicator`.
  /// \throws std::invalid_argument for a null communicator or pointer or zero
  ///   bytes; nccl_error when NCCL refuses.
  nccl_registration(ncclComm_t communicator, void* p, std::size_t bytes);
  /// Registers the memory of `registered`. \throws as above.
  template <class T>
  nccl_registration(ncclComm_t communicator, buffer<T>& registered)
      : nccl_registration(communicator, registered.data(), registered.size_bytes()) {}
  /// Deregisters. Never throws.
  ~nccl_registration() { reset(); }

  nccl_registration(nccl_registration&& other) noexcept;
  nccl_registration& operator=(nccl_registration&& other) noexcept;
  nccl_registration(const nccl_registration&) = delete;
  nccl_registration& operator=(const nccl_registration&) = delete;

  /// Whether memory is registered (false once reset or moved from).
  [[nodiscard]] bool is_registered() const noexcept { return communicator_ != nullptr; }
  /// NCCL's handle for the registration.
  [[nodiscard]] void* handle() const noexcept { return handle_; }
  /// Deregisters now (ncclCommDeregister). Never throws.
  void reset() noexcept;

 private:
  ncclComm_t communicator_ = nullptr;
  void* handle_ = nullptr;
};

}  // namespace cudapmr
