// SPDX-License-Identifier: Apache-2.0
// device_memory_resource keeps the shared contract, over the default pool and an owned one.
#include "support/resource_contract.hpp"

namespace cudapmr::test {

using device_cases = ::testing::Types<device_default_case, device_owned_case>;
CUDAPMR_INSTANTIATE_RESOURCE_CONTRACT(Device, device_cases, device_cases);

}  // namespace cudapmr::test
