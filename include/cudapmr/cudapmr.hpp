// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file cudapmr.hpp
/// Umbrella header of the core library, `cudapmr::cudapmr`: errors, devices,
/// streams, the memory kinds, the adaptors and buffers. The other components
/// have folders and libraries of their own: `interop/` (`cudapmr::interop`:
/// CCCL, Thrust, DLPack, fmt formatters), `multiprocess/`
/// (`cudapmr::multiprocess`: IPC, the socket channel, child processes) and
/// `nccl/` (`cudapmr::nccl`).

#include "cudapmr/adaptors/caching_resource.hpp"
#include "cudapmr/adaptors/coalescing_resource.hpp"
#include "cudapmr/adaptors/failure_callback_adaptor.hpp"
#include "cudapmr/adaptors/history_adaptor.hpp"
#include "cudapmr/adaptors/limiting_adaptor.hpp"
#include "cudapmr/adaptors/logging_adaptor.hpp"
#include "cudapmr/adaptors/resource_adaptor.hpp"
#include "cudapmr/adaptors/statistics_adaptor.hpp"
#include "cudapmr/adaptors/tracking_adaptor.hpp"
#include "cudapmr/buffer.hpp"
#include "cudapmr/current_resource.hpp"
#include "cudapmr/device.hpp"
#include "cudapmr/device_malloc_resource.hpp"
#include "cudapmr/device_memory_resource.hpp"
#include "cudapmr/device_stack.hpp"
#include "cudapmr/error.hpp"
#include "cudapmr/host_memory_resource.hpp"
#include "cudapmr/host_topology.hpp"
#include "cudapmr/launch.hpp"
#include "cudapmr/managed_hints.hpp"
#include "cudapmr/managed_memory_resource.hpp"
#include "cudapmr/memory_kind.hpp"
#include "cudapmr/memory_snapshot.hpp"
#include "cudapmr/pinned_memory_resource.hpp"
#include "cudapmr/pool_resource.hpp"
#include "cudapmr/sanitizer_annotations.hpp"
#include "cudapmr/snapshot_export.hpp"
#include "cudapmr/stream.hpp"
#include "cudapmr/stream_ordered_resource.hpp"
#include "cudapmr/version.hpp"
#include "cudapmr/virtual_memory_resource.hpp"
