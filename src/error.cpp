// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/error.hpp"

#include "cudapmr/memory_snapshot.hpp"

#include <fmt/format.h>

#include <utility>

namespace cudapmr {
namespace {

class cuda_error_category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "cuda"; }
  std::string message(int value) const override {
    const auto error = static_cast<cudaError_t>(value);
    return fmt::format("{}: {}", cudaGetErrorName(error), cudaGetErrorString(error));
  }
};

std::string describe(cudaError_t error, const std::string& context) {
  if (is_no_device_error(error)) return fmt::format("no CUDA device was found ({})", context);
  return context;
}

}  // namespace

const std::error_category& cuda_category() noexcept {
  static const cuda_error_category category;
  return category;
}

bool is_no_device_error(cudaError_t error) noexcept {
  return error == cudaErrorNoDevice || error == cudaErrorInsufficientDriver;
}

cuda_error::cuda_error(cudaError_t error, std::string context)
    : std::system_error(static_cast<int>(error), cuda_category(), describe(error, context)) {}

out_of_memory::out_of_memory(std::size_t bytes, std::size_t alignment, std::string resource, std::string reason)
    : bytes_(bytes),
      message_(fmt::format("out of memory: {} could not allocate {} bytes (alignment {}): {}", resource, bytes,
                           alignment, reason)) {}

out_of_memory::out_of_memory(const out_of_memory& refusal, std::shared_ptr<const out_of_memory_report> report)
    : std::bad_alloc(refusal), bytes_(refusal.bytes_), message_(refusal.message_), report_(std::move(report)) {
  if (report_) message_ += "\n" + report_->text;
}

out_of_memory::out_of_memory(std::size_t bytes, std::size_t alignment, std::string resource, std::string_view context,
                             const out_of_memory& cause)
    : out_of_memory(bytes, alignment, std::move(resource), fmt::format("{}: {}", context, cause.what())) {
  report_ = cause.report_;
}

namespace detail {

void throw_cuda_error(cudaError_t error, const char* call, const char* file, int line) {
  // Most runtime errors are not sticky; reading the last error clears the
  // state so that the next, unrelated call does not report this failure.
  static_cast<void>(cudaGetLastError());
  throw cuda_error(error, fmt::format("{} at {}:{}", call, file, line));
}

}  // namespace detail
}  // namespace cudapmr
