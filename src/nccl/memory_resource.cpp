// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/nccl/memory_resource.hpp"

#include "cudapmr/detail/cuda_check.hpp"

#include "cudapmr/device.hpp"
#include "cudapmr/error.hpp"
#include "cudapmr/nccl/error.hpp"

#include <fmt/format.h>

#include <nccl.h>

#include <cstdint>
#include <stdexcept>

namespace cudapmr {
namespace {

int validated(int device) {
  detail::validate_device_ordinal(device);
  return device;
}

}  // namespace

nccl_memory_resource::nccl_memory_resource(int device)
    : stream_ordered_resource(memory_kind::device, validated(device)), bound_stream_(device) {}

std::string nccl_memory_resource::description() const {
  return fmt::format("nccl_memory_resource (device {})", device_id());
}

void* nccl_memory_resource::do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref /*stream*/) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  ncclResult_t result = ncclSuccess;
  {
    const detail::scoped_device guard(device_id());  // ncclMemAlloc allocates on the current device
    result = ncclMemAlloc(&p, bytes);
  }
  if (result != ncclSuccess) {
    static_cast<void>(detail::recover_from(cudaPeekAtLastError()));  // NCCL's CUDA failure: leave none behind
    // NCCL reports exhaustion as a CUDA failure; a request beyond free memory is exhaustion.
    if (bytes > device(device_id()).free_memory())
      throw out_of_memory(bytes, alignment, description(),
                          fmt::format("ncclMemAlloc: {} {}", ncclGetErrorString(result), detail::last_nccl_error(nullptr)));
    detail::throw_nccl_error(result, "ncclMemAlloc", nullptr, std::source_location::current());
  }
  // NCCL maps memory at its allocation granularity (2 MiB or more), past
  // max_alignment; only its cudaMalloc fallback (NCCL_CUMEM_ENABLE=0) gives less.
  if (reinterpret_cast<std::uintptr_t>(p) % alignment != 0) {
    static_cast<void>(ncclMemFree(p));
    throw std::invalid_argument(fmt::format("{}: ncclMemAlloc gave {} for {} bytes, not aligned to the {} asked for",
                                            description(), fmt::ptr(p), bytes, alignment));
  }
  return p;
}

void nccl_memory_resource::do_deallocate_async(void* p, std::size_t /*bytes*/, std::size_t /*alignment*/,
                                               stream_ref stream) noexcept {
  // ncclMemFree unmaps at once: work queued on `stream` before this call must finish first.
  CUDAPMR_ASSERT_CUDA_SUCCESS(cudaStreamSynchronize(stream.get()));
  if (ncclMemFree(p) != ncclSuccess) static_cast<void>(detail::recover_from(cudaPeekAtLastError()));
}

bool nccl_memory_resource::do_is_equal(const std::pmr::memory_resource& other) const noexcept {
  const auto* other_nccl = dynamic_cast<const nccl_memory_resource*>(&other);
  return other_nccl != nullptr && other_nccl->device_id() == device_id();
}

}  // namespace cudapmr
