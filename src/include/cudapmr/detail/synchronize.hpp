// SPDX-License-Identifier: Apache-2.0
#pragma once
// Waiting for every stream of the devices a resource's memory belongs to.

#include "cudapmr/memory_kind.hpp"

namespace cudapmr::detail {

/// Waits until all work on `device_id` has completed; where it is -1, on the
/// current device and every other one the runtime has an active context on
/// (the others have no work); nothing for pageable memory. \throws cuda_error.
void synchronize_devices(memory_kind kind, int device_id);

/// Whether the runtime has a context on `ordinal` that work could be queued
/// in: its primary context is active (unknown counts as active). A device
/// reset leaves it inactive, and selecting the device would make a new one.
[[nodiscard]] bool has_active_context(int ordinal) noexcept;

}  // namespace cudapmr::detail
