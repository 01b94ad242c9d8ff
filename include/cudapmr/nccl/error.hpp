// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file nccl/error.hpp
/// Errors from NCCL calls (part of cudapmr::nccl, built where NCCL is found).

#include <nccl.h>

#include <source_location>
#include <string>
#include <system_error>

namespace cudapmr {

/// The error category of `ncclResult_t` values: `name()` is "nccl", messages
/// are NCCL's own text ("unhandled cuda error (run with NCCL_DEBUG=INFO for details)").
const std::error_category& nccl_category() noexcept;

/// An NCCL call failed. `code().value()` is the `ncclResult_t`; `what()` says
/// which call, NCCL's answer, NCCL's last error text, and where.
class nccl_error : public std::system_error {
 public:
  /// \param result NCCL's answer.
  /// \param context what was asked ("ncclCommInitRank (rank 1 of 2, device 1) at collective.cpp:42").
  nccl_error(ncclResult_t result, const std::string& context);

  [[nodiscard]] ncclResult_t result() const noexcept { return static_cast<ncclResult_t>(code().value()); }
};

namespace detail {
/// NCCL's text for its last error on `communicator` (any where null); empty where there is none.
[[nodiscard]] std::string last_nccl_error(ncclComm_t communicator);

/// Throws nccl_error naming `call`, NCCL's last error for `communicator` (any
/// where null) and the caller's file:line.
[[noreturn]] void throw_nccl_error(ncclResult_t result, const char* call, ncclComm_t communicator,
                                   std::source_location where);
}  // namespace detail

/// Checks the result of the NCCL call named `call`: unless it is ncclSuccess,
/// throws nccl_error with NCCL's answer, its last error text for
/// `communicator`, and the caller's file:line. The message is built only on failure.
inline void check_nccl(ncclResult_t result, const char* call, ncclComm_t communicator = nullptr,
                       std::source_location where = std::source_location::current()) {
  if (result != ncclSuccess) [[unlikely]]
    detail::throw_nccl_error(result, call, communicator, where);
}

}  // namespace cudapmr
