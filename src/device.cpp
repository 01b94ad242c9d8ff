// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/device.hpp"

#include "cudapmr/detail/cuda_check.hpp"

#include "cudapmr/error.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace cudapmr {

int device::count() noexcept {
  int devices = 0;
  if (!detail::recover_from(cudaGetDeviceCount(&devices))) return 0;  // no device, or no driver
  return devices;
}

device device::current() {
  detail::validate_device_ordinal(0);
  int ordinal = 0;
  CUDAPMR_CHECK(cudaGetDevice(&ordinal));
  return device(ordinal);
}

device::device(int ordinal) : ordinal_(ordinal) { detail::validate_device_ordinal(ordinal); }

std::string device::name() const {
  cudaDeviceProp properties{};
  CUDAPMR_CHECK(cudaGetDeviceProperties(&properties, ordinal_));
  return properties.name;
}

device::capability device::compute_capability() const {
  return {attribute(cudaDevAttrComputeCapabilityMajor), attribute(cudaDevAttrComputeCapabilityMinor)};
}

int device::attribute(cudaDeviceAttr attribute) const {
  int value = 0;
  CUDAPMR_CHECK(cudaDeviceGetAttribute(&value, attribute, ordinal_));
  return value;
}

std::size_t device::total_memory() const {
  detail::scoped_device guard(ordinal_);
  std::size_t free_bytes = 0, total_bytes = 0;
  CUDAPMR_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return total_bytes;
}

std::size_t device::free_memory() const {
  detail::scoped_device guard(ordinal_);
  std::size_t free_bytes = 0, total_bytes = 0;
  CUDAPMR_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return free_bytes;
}

std::optional<std::size_t> device::free_memory_if_known(int ordinal) noexcept {
  try {
    return device(ordinal).free_memory();
  } catch (...) {  // no such device, or CUDA cannot say
    return std::nullopt;
  }
}

void device::set_current() const { CUDAPMR_CHECK(cudaSetDevice(ordinal_)); }

namespace detail {

void validate_device_ordinal(int ordinal) {
  int devices = 0;
  check_cuda(cudaGetDeviceCount(&devices),
             [&] { return fmt::format("cudaGetDeviceCount while looking for device {}", ordinal); });
  if (ordinal < 0 || ordinal >= devices)
    throw std::invalid_argument(
        fmt::format("device ordinal {} is out of range: this machine has {} CUDA device(s)", ordinal, devices));
}

scoped_device::scoped_device(int ordinal) : previous_(0), changed_(false) {
  CUDAPMR_CHECK(cudaGetDevice(&previous_));
  if (previous_ != ordinal) {
    CUDAPMR_CHECK(cudaSetDevice(ordinal));
    changed_ = true;
  }
}

scoped_device::~scoped_device() {
  if (changed_) CUDAPMR_ASSERT_CUDA_SUCCESS(cudaSetDevice(previous_));
}

}  // namespace detail
}  // namespace cudapmr
