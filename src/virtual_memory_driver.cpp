// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/detail/virtual_memory_driver.hpp"

#include "cudapmr/detail/cuda_check.hpp"
#include "cudapmr/detail/driver_entry_point.hpp"

#include <fmt/format.h>

namespace cudapmr::detail {
namespace {

template <class Function>
void load(Function& function, const char* name) {
  function = driver_function<Function>(name);
  if (function == nullptr)
    throw cuda_error(cudaErrorNotSupported,
                     fmt::format("the driver gives out no {} (virtual memory management needs CUDA 11 or later)", name));
}

virtual_memory_driver load_all() {
  virtual_memory_driver driver;
  load(driver.device_get, "cuDeviceGet");
  load(driver.device_get_attribute, "cuDeviceGetAttribute");
  load(driver.get_allocation_granularity, "cuMemGetAllocationGranularity");
  load(driver.address_reserve, "cuMemAddressReserve");
  load(driver.address_free, "cuMemAddressFree");
  load(driver.create, "cuMemCreate");
  load(driver.release, "cuMemRelease");
  load(driver.map, "cuMemMap");
  load(driver.unmap, "cuMemUnmap");
  load(driver.set_access, "cuMemSetAccess");
  load(driver.export_to_shareable_handle, "cuMemExportToShareableHandle");
  load(driver.import_from_shareable_handle, "cuMemImportFromShareableHandle");
  load(driver.retain_allocation_handle, "cuMemRetainAllocationHandle");
  load(driver.get_error_name, "cuGetErrorName");
  return driver;
}

}  // namespace

const virtual_memory_driver& load_virtual_memory_driver() {
  static const virtual_memory_driver driver = load_all();  // a throw leaves it to the next call to try again
  return driver;
}

std::string driver_error_name(CUresult status) {
  const char* name = nullptr;
  const auto& driver = load_virtual_memory_driver();
  if (driver.get_error_name(status, &name) != CUDA_SUCCESS || name == nullptr)
    return fmt::format("CUresult {}", static_cast<int>(status));
  return name;
}

void throw_driver_error(CUresult status, const std::string& context) {
  throw cuda_error(static_cast<cudaError_t>(status), fmt::format("{} (the driver answered {})", context,
                                                                 driver_error_name(status)));
}

void assert_driver_success(CUresult status, const char* call, const char* file, int line) noexcept {
  assert_cuda_success(static_cast<cudaError_t>(status), call, file, line);
}

}  // namespace cudapmr::detail
