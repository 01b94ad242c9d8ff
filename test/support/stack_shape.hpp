// SPDX-License-Identifier: Apache-2.0
#pragma once
// The default stack's front over its engine, as device_stack_options builds
// them, over any leaf and a fake ordering: the stack's policies in a host test.

#include "support/fake_ordering.hpp"

#include <cudapmr/adaptors/caching_resource.hpp>
#include <cudapmr/adaptors/coalescing_resource.hpp>
#include <cudapmr/device_stack.hpp>

namespace cudapmr::test {

struct stack_shape {
  stack_shape(stream_ordered_resource& leaf, fake_ordering& ordering, const device_stack_options& options = {})
      : engine(leaf, options.engine, ordering), front(engine, options.front, ordering) {}
  coalescing_resource engine;
  caching_resource front;  // declared last: destroyed first, its blocks back to the engine
};

}  // namespace cudapmr::test
