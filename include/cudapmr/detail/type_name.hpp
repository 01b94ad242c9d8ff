// SPDX-License-Identifier: Apache-2.0
#pragma once
// The name of a type as the compiler spells it, for readable reports.

#include <string_view>

namespace cudapmr::detail {

/// "float", "unsigned int", "my::pixel": read from the signature GCC and Clang
/// print for this function; "unknown type" where the compiler spells it otherwise.
template <class T>
[[nodiscard]] constexpr std::string_view type_name() noexcept {
  const std::string_view signature = __PRETTY_FUNCTION__;  // "... [with T = float; ...]" or "... [T = float]"
  constexpr std::string_view marker = "T = ";
  const std::size_t start = signature.find(marker);
  if (start == std::string_view::npos) return "unknown type";
  const std::size_t begin = start + marker.size();
  const std::size_t end = signature.find_first_of(";]", begin);
  return end == std::string_view::npos ? signature.substr(begin) : signature.substr(begin, end - begin);
}

}  // namespace cudapmr::detail
