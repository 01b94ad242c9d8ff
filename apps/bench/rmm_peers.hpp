// SPDX-License-Identifier: Apache-2.0
#pragma once
// RMM's device resources as benchmark peers. Built only where CMake finds RMM
// (the PyPI wheel librmm-cu13 ships it), in a shared library of its own with
// hidden symbols: RMM brings a newer CCCL than the toolkit's, which the rest
// of the benchmark uses.

#include "peer_allocators.hpp"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace bench {

struct named_peer {
  std::string name;  // "peer:RMM pool", ...
  std::function<std::unique_ptr<allocator_under_test>()> make;
};

/// RMM's pool (over cudaMalloc, growing from nothing), arena, binning (bins
/// 2^8..2^22 over the pool) and cuda_async resources, each made fresh.
__attribute__((visibility("default"))) std::vector<named_peer> rmm_peers();

}  // namespace bench
