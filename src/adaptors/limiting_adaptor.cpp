// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/adaptors/limiting_adaptor.hpp"

#include "cudapmr/detail/byte_budget.hpp"
#include "cudapmr/error.hpp"

#include <fmt/format.h>

namespace cudapmr {

std::string limiting_adaptor::description() const {
  return describe_as(fmt::format("limiting_adaptor (cap {} bytes)", cap_).c_str());
}

void limiting_adaptor::do_report(resource_state& state) const {
  const std::size_t used = used_bytes();
  state.used_bytes = used;
  state.cap_bytes = cap();
  state.largest_free_block = cap() - std::min(cap(), used);
}

void* limiting_adaptor::do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) {
  std::size_t used = 0;
  if (!detail::try_reserve(used_, bytes, cap_, used))
    throw out_of_memory(bytes, alignment, description(),
                        fmt::format("the cap is {} bytes, {} bytes are in use, and {} more would pass it by {} bytes",
                                    cap_, used, bytes, bytes - (cap_ - used)));
  try {
    return upstream_resource().allocate_async(bytes, alignment, stream);
  } catch (...) {
    used_.fetch_sub(bytes, std::memory_order_relaxed);
    throw;
  }
}

void limiting_adaptor::do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment,
                                           stream_ref stream) noexcept {
  // Released after the upstream has the memory back, so that a caller let in
  // by the release finds it there.
  upstream_resource().deallocate_async(p, bytes, alignment, stream);
  used_.fetch_sub(bytes, std::memory_order_relaxed);
}

}  // namespace cudapmr
