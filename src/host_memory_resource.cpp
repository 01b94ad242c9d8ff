// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/host_memory_resource.hpp"

#include "cudapmr/detail/byte_budget.hpp"
#include "cudapmr/error.hpp"

#include <fmt/format.h>

#include <limits>
#include <new>

namespace cudapmr {

std::string host_memory_resource::description() const {
  if (capacity_ == std::numeric_limits<std::size_t>::max()) return "host_memory_resource";
  return fmt::format("host_memory_resource (capacity {} bytes)", capacity_);
}

void host_memory_resource::do_report(resource_state& state) const {
  const std::size_t used = used_bytes();
  state.used_bytes = used;
  if (capacity_ == std::numeric_limits<std::size_t>::max()) return;  // unbounded: no cap to report
  state.cap_bytes = capacity_;
  state.largest_free_block = capacity_ - std::min(capacity_, used);
}

void* host_memory_resource::do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref /*stream*/) {
  // The system allocator rounds an aligned request up to its alignment, and
  // libstdc++'s rounding wraps past size_t to a few bytes it then hands out.
  if (bytes > std::numeric_limits<std::size_t>::max() - (alignment - 1))
    throw out_of_memory(bytes, alignment, description(),
                        fmt::format("the request rounded up to its alignment of {} overflows size_t", alignment));
  // Reserve the bytes first so that concurrent callers never overshoot the capacity.
  std::size_t used = 0;
  if (!detail::try_reserve(used_, bytes, capacity_, used))
    throw out_of_memory(bytes, alignment, description(), fmt::format("{} of {} bytes in use", used, capacity_));
  if (bytes == 0) return nullptr;
  void* p = ::operator new(bytes, std::align_val_t{alignment}, std::nothrow);
  if (p == nullptr) {
    used_.fetch_sub(bytes, std::memory_order_relaxed);
    throw out_of_memory(bytes, alignment, description(), "the system allocator refused");
  }
  return p;
}

void host_memory_resource::do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment,
                                               stream_ref /*stream*/) noexcept {
  ::operator delete(p, std::align_val_t{alignment});
  used_.fetch_sub(bytes, std::memory_order_relaxed);
}

}  // namespace cudapmr
