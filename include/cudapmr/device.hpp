// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file device.hpp
/// A small, non-owning handle to one CUDA device.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <optional>
#include <string>

namespace cudapmr {

/// One CUDA device, named by its ordinal.
class device {
 public:
  /// A compute capability, e.g. {9, 0} for an H200.
  struct capability {
    int major = 0;
    int minor = 0;
    friend bool operator==(const capability&, const capability&) = default;
  };

  /// The number of CUDA devices; 0 where there is no device or no driver.
  [[nodiscard]] static int count() noexcept;

  /// The device current on the calling thread.
  /// \throws cuda_error where no device exists.
  [[nodiscard]] static device current();

  /// \throws cuda_error ("no CUDA device was found") where there is none;
  /// std::invalid_argument naming the count where `ordinal` is out of range.
  explicit device(int ordinal);

  [[nodiscard]] int ordinal() const noexcept { return ordinal_; }
  [[nodiscard]] std::string name() const;
  [[nodiscard]] capability compute_capability() const;
  /// Any `cudaDeviceAttr` of this device.
  [[nodiscard]] int attribute(cudaDeviceAttr attribute) const;
  /// Total and currently free global memory of this device, in bytes.
  [[nodiscard]] std::size_t total_memory() const;
  [[nodiscard]] std::size_t free_memory() const;
  /// The free memory of device `ordinal`, or nothing where there is no such
  /// device or CUDA cannot say: for reports and history entries, which go on
  /// without it. Never throws.
  [[nodiscard]] static std::optional<std::size_t> free_memory_if_known(int ordinal) noexcept;
  /// Makes this device current on the calling thread.
  void set_current() const;

  friend bool operator==(const device&, const device&) = default;

 private:
  int ordinal_;
};

namespace detail {
/// Checks that `ordinal` names an existing device; throws as `device(int)` does.
void validate_device_ordinal(int ordinal);

/// Makes a device current for its lifetime and restores the caller's device.
class scoped_device {
 public:
  explicit scoped_device(int ordinal);
  ~scoped_device();
  scoped_device(const scoped_device&) = delete;
  scoped_device& operator=(const scoped_device&) = delete;

 private:
  int previous_;
  bool changed_;
};
}  // namespace detail

}  // namespace cudapmr
