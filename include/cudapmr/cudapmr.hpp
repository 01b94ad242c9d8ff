// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file cudapmr.hpp
/// Umbrella header: every public cudapmr header, except the interop headers
/// that need more than the toolkit (cccl.hpp, thrust_allocator.hpp, dlpack.hpp)
/// and the NCCL headers (nccl_*.hpp, in cudapmr::nccl).

#include "cudapmr/adaptors/caching_resource.hpp"
#include "cudapmr/adaptors/failure_callback_adaptor.hpp"
#include "cudapmr/adaptors/limiting_adaptor.hpp"
#include "cudapmr/adaptors/logging_adaptor.hpp"
#include "cudapmr/adaptors/resource_adaptor.hpp"
#include "cudapmr/adaptors/statistics_adaptor.hpp"
#include "cudapmr/adaptors/tracking_adaptor.hpp"
#include "cudapmr/buffer.hpp"
#include "cudapmr/current_resource.hpp"
#include "cudapmr/device.hpp"
#include "cudapmr/device_memory_resource.hpp"
#include "cudapmr/error.hpp"
#include "cudapmr/host_memory_resource.hpp"
#include "cudapmr/ipc.hpp"
#include "cudapmr/ipc_channel.hpp"
#include "cudapmr/launch.hpp"
#include "cudapmr/managed_hints.hpp"
#include "cudapmr/managed_memory_resource.hpp"
#include "cudapmr/memory_kind.hpp"
#include "cudapmr/pinned_memory_resource.hpp"
#include "cudapmr/pool_resource.hpp"
#include "cudapmr/process.hpp"
#include "cudapmr/sanitizer_annotations.hpp"
#include "cudapmr/stream.hpp"
#include "cudapmr/stream_ordered_resource.hpp"
#include "cudapmr/version.hpp"
