// SPDX-License-Identifier: Apache-2.0
// The non-template part of cccl.hpp; compiling it also checks the header's static_asserts.
#include "cudapmr/interop/cccl.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace cudapmr::detail {

void require_kind(const stream_ordered_resource& resource, memory_kind expected) {
  if (resource.kind() != expected)
    throw std::invalid_argument(fmt::format("cccl_resource<memory_kind::{}> cannot refer to {}, which hands out {} memory",
                                            to_string(expected), resource.description(), to_string(resource.kind())));
}

}  // namespace cudapmr::detail
