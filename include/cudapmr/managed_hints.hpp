// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file managed_hints.hpp
/// The vocabulary of managed-memory prefetches and advice: where pages should
/// live (`memory_location`) and what the driver is told about them
/// (`managed_advice`). The managed resource and managed buffers take them.

#include <string_view>

namespace cudapmr {

/// The host, or one device: where managed pages may be moved, or who is
/// advised to access them.
class memory_location final {
 public:
  /// Host memory.
  [[nodiscard]] static constexpr memory_location host() noexcept { return memory_location(true, -1); }
  /// The memory of device `ordinal` (checked where it is used).
  [[nodiscard]] static constexpr memory_location device(int ordinal) noexcept {
    return memory_location(false, ordinal);
  }

  [[nodiscard]] constexpr bool is_host() const noexcept { return host_; }
  /// The device ordinal; -1 for the host.
  [[nodiscard]] constexpr int device_ordinal() const noexcept { return ordinal_; }

  friend constexpr bool operator==(const memory_location&, const memory_location&) = default;

 private:
  constexpr memory_location(bool host, int ordinal) noexcept : host_(host), ordinal_(ordinal) {}
  bool host_;
  int ordinal_;
};

/// Advice about a range of managed memory (cudaMemAdvise); each `set_` has an `unset_`.
enum class managed_advice {
  /// Mostly read: readers get copies of the pages instead of moving them. The location is ignored.
  set_read_mostly,
  unset_read_mostly,
  /// Pages live at the location and leave it only when they must.
  set_preferred_location,
  unset_preferred_location,
  /// The location keeps a mapping of the pages, wherever they live, so that its accesses do not fault.
  set_accessed_by,
  unset_accessed_by,
};

/// "set_read_mostly", "unset_read_mostly", ... as spelled in the enumeration.
[[nodiscard]] constexpr std::string_view to_string(managed_advice advice) noexcept {
  switch (advice) {
    case managed_advice::set_read_mostly: return "set_read_mostly";
    case managed_advice::unset_read_mostly: return "unset_read_mostly";
    case managed_advice::set_preferred_location: return "set_preferred_location";
    case managed_advice::unset_preferred_location: return "unset_preferred_location";
    case managed_advice::set_accessed_by: return "set_accessed_by";
    case managed_advice::unset_accessed_by: return "unset_accessed_by";
  }
  return "unknown";
}

}  // namespace cudapmr
