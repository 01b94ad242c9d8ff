// SPDX-License-Identifier: Apache-2.0
// host_memory_resource keeps the shared contract (it needs no GPU).
#include "support/resource_contract.hpp"

namespace cudapmr::test {

using host_cases = ::testing::Types<host_case>;
CUDAPMR_INSTANTIATE_RESOURCE_CONTRACT(Host, host_cases, host_cases);

}  // namespace cudapmr::test
