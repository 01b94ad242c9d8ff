#pragma once
/// \file cudapmr.hpp
/// Umbrella header: every public cudapmr header.

#include "cudapmr/buffer.hpp"
#include "cudapmr/device.hpp"
#include "cudapmr/device_memory_resource.hpp"
#include "cudapmr/error.hpp"
#include "cudapmr/host_memory_resource.hpp"
#include "cudapmr/managed_memory_resource.hpp"
#include "cudapmr/memory_kind.hpp"
#include "cudapmr/pinned_memory_resource.hpp"
#include "cudapmr/pool_resource.hpp"
#include "cudapmr/stream.hpp"
#include "cudapmr/stream_ordered_resource.hpp"
