// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/nccl/error.hpp"

#include <fmt/format.h>

namespace cudapmr {
namespace {

class nccl_error_category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "nccl"; }
  std::string message(int value) const override { return ncclGetErrorString(static_cast<ncclResult_t>(value)); }
};

}  // namespace

const std::error_category& nccl_category() noexcept {
  static const nccl_error_category category;
  return category;
}

nccl_error::nccl_error(ncclResult_t result, const std::string& context)
    : std::system_error(static_cast<int>(result), nccl_category(), context) {}

namespace detail {

std::string last_nccl_error(ncclComm_t communicator) {
  const char* last = ncclGetLastError(communicator);
  return last != nullptr ? last : "";
}

void throw_nccl_error(ncclResult_t result, const char* call, ncclComm_t communicator, std::source_location where) {
  // NCCL's last error often says more than the result code (which peer, which CUDA call).
  const std::string last = last_nccl_error(communicator);
  throw nccl_error(result, fmt::format("{} at {}:{}{}{}", call, where.file_name(), where.line(),
                                       last.empty() ? "" : "; NCCL says: ", last));
}

}  // namespace detail
}  // namespace cudapmr
