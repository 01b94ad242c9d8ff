// SPDX-License-Identifier: Apache-2.0
// NVTX's memory extension, the channel compute-sanitizer listens on; NVTX is
// header-only and does nothing until a tool injects itself.
#include "cudapmr/sanitizer_annotations.hpp"

#include <nvtx3/nvToolsExtMemCudaRt.h>

namespace cudapmr {
namespace {

nvtxDomainHandle_t cudapmr_domain() noexcept {
  static const nvtxDomainHandle_t domain = nvtxDomainCreateA("cudapmr");
  return domain;
}

}  // namespace

void mark_initialized(const void* p, std::size_t bytes, stream_ref stream) noexcept {
  if (p == nullptr || bytes == 0) return;
  const nvtxMemVirtualRangeDesc_t range{bytes, p};
  nvtxMemMarkInitializedBatch_t batch{};
  batch.extCompatID = NVTX_EXT_COMPATID_MEM;
  batch.structSize = sizeof(batch);
  batch.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
  batch.regionDescCount = 1;
  batch.regionDescElementSize = sizeof(range);
  batch.regionDescElements = &range;
  nvtxMemCudaMarkInitialized(cudapmr_domain(), stream.get(), 0, &batch);
}

}  // namespace cudapmr
