// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file format.hpp
/// fmt formatters for cudapmr's reports: memory kinds, pool statistics,
/// adaptor statistics and buffers, with byte sizes in binary units
/// ("1.5 GiB"). Needs fmt, so the umbrella header leaves it out.

#include "cudapmr/adaptors/statistics_adaptor.hpp"
#include "cudapmr/buffer.hpp"
#include "cudapmr/detail/type_name.hpp"
#include "cudapmr/memory_kind.hpp"
#include "cudapmr/pool_resource.hpp"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace cudapmr {

/// A byte count that formats in binary units with at most one decimal:
/// "512 B", "1.5 KiB", "2 GiB", "-3 MiB". `fmt::format("{}", human_bytes(n))`.
class human_bytes {
 public:
  template <std::integral Integer>
  constexpr explicit human_bytes(Integer bytes) noexcept
      : magnitude_(static_cast<std::uint64_t>(bytes)), negative_(false) {
    if constexpr (std::is_signed_v<Integer>) {
      negative_ = bytes < 0;
      if (negative_) magnitude_ = std::uint64_t{0} - static_cast<std::uint64_t>(bytes);
    }
  }

  [[nodiscard]] constexpr std::uint64_t magnitude() const noexcept { return magnitude_; }
  [[nodiscard]] constexpr bool negative() const noexcept { return negative_; }

 private:
  std::uint64_t magnitude_;
  bool negative_;
};

namespace detail {

/// A formatter that takes no format specification: "{}" only.
struct plain_formatter {
  constexpr auto parse(fmt::format_parse_context& context) {
    const auto* it = context.begin();
    if (it != context.end() && *it != '}') throw fmt::format_error("cudapmr formatters take no format specification");
    return it;
  }
};

}  // namespace detail
}  // namespace cudapmr

/// \cond
// fmt's formatters, specializations the API reference leaves out.
template <>
struct fmt::formatter<cudapmr::human_bytes> : cudapmr::detail::plain_formatter {
  template <class FormatContext>
  auto format(const cudapmr::human_bytes& size, FormatContext& context) const {
    constexpr std::array<std::string_view, 7> units{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    const std::string_view sign = size.negative() ? "-" : "";
    if (size.magnitude() < 1024) return fmt::format_to(context.out(), "{}{} B", sign, size.magnitude());
    std::size_t unit = 0;
    double value = static_cast<double>(size.magnitude());
    while (value >= 1024.0 && unit + 1 < units.size()) {
      value /= 1024.0;
      ++unit;
    }
    double rounded = std::round(value * 10.0) / 10.0;
    if (rounded >= 1024.0 && unit + 1 < units.size()) {  // 1023.96 KiB reads better as 1 MiB
      rounded = std::round(value / 1024.0 * 10.0) / 10.0;
      ++unit;
    }
    if (rounded == std::floor(rounded)) return fmt::format_to(context.out(), "{}{:.0f} {}", sign, rounded, units[unit]);
    return fmt::format_to(context.out(), "{}{:.1f} {}", sign, rounded, units[unit]);
  }
};

/// "device", "pinned", "managed" or "pageable"; takes string format specifications ("{:>8}").
template <>
struct fmt::formatter<cudapmr::memory_kind> : fmt::formatter<std::string_view> {
  template <class FormatContext>
  auto format(cudapmr::memory_kind kind, FormatContext& context) const {
    return fmt::formatter<std::string_view>::format(cudapmr::to_string(kind), context);
  }
};

/// "used 1.5 GiB (high 2 GiB), reserved 2 GiB (high 2 GiB)".
template <>
struct fmt::formatter<cudapmr::pool_stats> : cudapmr::detail::plain_formatter {
  template <class FormatContext>
  auto format(const cudapmr::pool_stats& stats, FormatContext& context) const {
    using cudapmr::human_bytes;
    return fmt::format_to(context.out(), "used {} (high {}), reserved {} (high {})", human_bytes(stats.used_current),
                          human_bytes(stats.used_high), human_bytes(stats.reserved_current),
                          human_bytes(stats.reserved_high));
  }
};

/// "current 1.5 GiB in 3 allocations, peak 2 GiB in 5, total 10 GiB in 100".
template <>
struct fmt::formatter<cudapmr::resource_statistics> : cudapmr::detail::plain_formatter {
  template <class FormatContext>
  auto format(const cudapmr::resource_statistics& statistics, FormatContext& context) const {
    using cudapmr::human_bytes;
    return fmt::format_to(context.out(), "current {} in {} allocation{}, peak {} in {}, total {} in {}",
                          human_bytes(statistics.bytes.current), statistics.allocations.current,
                          statistics.allocations.current == 1 ? "" : "s", human_bytes(statistics.bytes.peak),
                          statistics.allocations.peak, human_bytes(statistics.bytes.total),
                          statistics.allocations.total);
  }
};

/// "buffer<float>: 65536 elements, 256 KiB of device memory on device 0";
/// "buffer<float>: closed" once closed or moved from.
template <class T>
struct fmt::formatter<cudapmr::buffer<T>> : cudapmr::detail::plain_formatter {
  template <class FormatContext>
  auto format(const cudapmr::buffer<T>& values, FormatContext& context) const {
    const std::string_view element = cudapmr::detail::type_name<T>();
    const cudapmr::stream_ordered_resource* resource = values.resource();
    if (resource == nullptr) return fmt::format_to(context.out(), "buffer<{}>: closed", element);
    auto out = fmt::format_to(context.out(), "buffer<{}>: {} elements, {} of {} memory", element, values.size(),
                              cudapmr::human_bytes(values.size_bytes()), resource->kind());
    if (resource->device_id() < 0) return out;
    return fmt::format_to(out, " on device {}", resource->device_id());
  }
};
/// \endcond
