// SPDX-License-Identifier: Apache-2.0
// pinned_memory_resource keeps the shared contract, over the default pool and an owned one.
#include "support/resource_contract.hpp"

namespace cudapmr::test {

using pinned_cases = ::testing::Types<pinned_default_case, pinned_owned_case>;
CUDAPMR_INSTANTIATE_RESOURCE_CONTRACT(Pinned, pinned_cases, pinned_cases);

}  // namespace cudapmr::test
