// SPDX-License-Identifier: Apache-2.0
#pragma once
// The driver's virtual memory management calls, taken through the runtime
// (driver_entry_point.hpp) so that nothing links libcuda, and the check that
// turns their CUresult into cuda_error.

#include "cudapmr/error.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <string>
#include <utility>

namespace cudapmr::detail {

/// The calls virtual_memory_resource and its importer make.
struct virtual_memory_driver {
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDeviceGetAttribute_v2000 device_get_attribute = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 get_allocation_granularity = nullptr;
  PFN_cuMemAddressReserve_v10020 address_reserve = nullptr;
  PFN_cuMemAddressFree_v10020 address_free = nullptr;
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemSetAccess_v10020 set_access = nullptr;
  PFN_cuMemExportToShareableHandle_v10020 export_to_shareable_handle = nullptr;
  PFN_cuMemImportFromShareableHandle_v10020 import_from_shareable_handle = nullptr;
  PFN_cuMemRetainAllocationHandle_v11000 retain_allocation_handle = nullptr;
  PFN_cuGetErrorName_v6000 get_error_name = nullptr;
};

/// The driver's calls, loaded once.
/// \throws cuda_error (cudaErrorNotSupported) naming the first call the driver does not give out.
[[nodiscard]] const virtual_memory_driver& load_virtual_memory_driver();

/// The driver's name for `status` ("CUDA_ERROR_OUT_OF_MEMORY"), or its number where the driver has none.
[[nodiscard]] std::string driver_error_name(CUresult status);

/// Throws cuda_error for a failed driver call: the runtime's error of the same
/// number, and a context that names the driver's answer.
[[noreturn]] void throw_driver_error(CUresult status, const std::string& context);

/// Unless `status` is CUDA_SUCCESS, throws as throw_driver_error with the
/// context `describe()` builds (only on failure).
template <class Describe>
void check_driver(CUresult status, Describe&& describe) {
  if (status != CUDA_SUCCESS) [[unlikely]]
    throw_driver_error(status, std::forward<Describe>(describe)());
}

/// For driver calls on paths that must not throw (unmap, release): as
/// CUDAPMR_ASSERT_CUDA_SUCCESS, whose may-fail-at-exit answers share their numbers with the driver's.
void assert_driver_success(CUresult status, const char* call, const char* file, int line) noexcept;

/// Granularity-rounded size: `bytes` rounded up to a multiple of `granularity`
/// (a power of two); 0 where that overflows.
[[nodiscard]] constexpr std::size_t round_up_to(std::size_t bytes, std::size_t granularity) noexcept {
  const std::size_t rounded = (bytes + granularity - 1) & ~(granularity - 1);
  return rounded < bytes ? 0 : rounded;
}

}  // namespace cudapmr::detail
