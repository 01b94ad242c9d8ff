// SPDX-License-Identifier: Apache-2.0
// managed_memory_resource keeps the shared contract, over the default pool and an owned one;
// it is never exhausted: oversubscribing managed memory can stall the whole GPU.
#include "support/resource_contract.hpp"

namespace cudapmr::test {

using managed_cases = ::testing::Types<managed_default_case, managed_owned_case>;
// Exhaustion runs over no case: an empty list instantiates nothing.
INSTANTIATE_TYPED_TEST_SUITE_P(Managed, ResourceContract, managed_cases);

}  // namespace cudapmr::test
