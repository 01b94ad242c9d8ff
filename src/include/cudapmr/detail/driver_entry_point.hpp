// SPDX-License-Identifier: Apache-2.0
#pragma once
// Driver API functions through the runtime (src/driver_entry_point.cpp), so
// that the library links the runtime alone.

namespace cudapmr::detail {

/// The driver function `name` with CUDA 12.0's signature, or null where the
/// driver does not give it out (no error is left behind).
[[nodiscard]] void* driver_entry_point(const char* name) noexcept;

/// As above, as a pointer to `Function`.
template <class Function>
[[nodiscard]] Function driver_function(const char* name) noexcept {
  return reinterpret_cast<Function>(driver_entry_point(name));
}

}  // namespace cudapmr::detail
