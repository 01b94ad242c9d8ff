#include "cudapmr/stream.hpp"

#include "cudapmr/device.hpp"
#include "cudapmr/error.hpp"

#include <utility>

namespace cudapmr {

stream::stream() : stream(device::current().ordinal()) {}

stream::stream(int device) : device_(device) {
  detail::validate_device_ordinal(device);
  detail::scoped_device guard(device);
  CUDAPMR_CHECK(cudaStreamCreateWithFlags(&handle_, cudaStreamNonBlocking));
}

stream::~stream() {
  if (handle_ != nullptr) static_cast<void>(cudaStreamDestroy(handle_));
}

stream::stream(stream&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), device_(std::exchange(other.device_, -1)) {}

stream& stream::operator=(stream&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) static_cast<void>(cudaStreamDestroy(handle_));
    handle_ = std::exchange(other.handle_, nullptr);
    device_ = std::exchange(other.device_, -1);
  }
  return *this;
}

void stream::synchronize() const { CUDAPMR_CHECK(cudaStreamSynchronize(handle_)); }

}  // namespace cudapmr
