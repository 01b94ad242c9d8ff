// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file memory_kind.hpp
/// What kind of memory a resource hands out, and who can touch it.

#include <string_view>

namespace cudapmr {

/// The memory kinds cudapmr serves. `pageable` is ordinary host memory (the
/// host test resource); the other three are CUDA memory.
enum class memory_kind { device, pinned, managed, pageable };

/// "device", "pinned", "managed" or "pageable".
[[nodiscard]] constexpr std::string_view to_string(memory_kind kind) noexcept {
  switch (kind) {
    case memory_kind::device: return "device";
    case memory_kind::pinned: return "pinned";
    case memory_kind::managed: return "managed";
    case memory_kind::pageable: return "pageable";
  }
  return "unknown";
}

/// Whether kernels can dereference memory of this kind.
[[nodiscard]] constexpr bool is_device_accessible(memory_kind kind) noexcept { return kind != memory_kind::pageable; }

/// Whether host code can dereference memory of this kind.
[[nodiscard]] constexpr bool is_host_accessible(memory_kind kind) noexcept { return kind != memory_kind::device; }

}  // namespace cudapmr
