// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/stream_ordered_resource.hpp"

#include "cudapmr/detail/call_stack.hpp"
#include "cudapmr/detail/stream_ordering.hpp"
#include "cudapmr/error.hpp"

#include <fmt/format.h>

#include <bit>
#include <new>
#include <stdexcept>

namespace cudapmr {

void* stream_ordered_resource::allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) {
  detail::validate_alignment(alignment, bytes);
  // Out of line, so that the usual path stays one load and a tail call: a
  // scope's destructor after the call, or its frame, would cost every allocation.
  if (detail::call_sites_wanted()) [[unlikely]] {
    void* const caller = __builtin_return_address(0);
    return [this, caller, bytes, alignment, stream] __attribute__((noinline, cold)) {
      const detail::call_site_scope call_site(caller);
      return do_allocate_async(bytes, alignment, stream);
    }();
  }
  return do_allocate_async(bytes, alignment, stream);
}

void stream_ordered_resource::deallocate_async(void* p, std::size_t bytes, std::size_t alignment,
                                               stream_ref stream) noexcept {
  if (p != nullptr) do_deallocate_async(p, bytes, alignment, stream);
}

void* stream_ordered_resource::do_allocate(std::size_t bytes, std::size_t alignment) {
  // libstdc++ declares pmr allocate never to return null (UBSan holds it to
  // that): zero bytes get a non-null, aligned pointer that owns nothing.
  if (bytes == 0) {
    detail::validate_alignment(alignment, bytes);
    return reinterpret_cast<void*>(alignment);
  }
  const stream_ref stream = own_bound_stream();
  const detail::call_site_scope call_site(__builtin_return_address(0));  // std::pmr's caller, not this function
  void* p = allocate_async(bytes, alignment, stream);
  if (kind() == memory_kind::pageable) return p;  // pageable memory involves no stream work
  if (const cudaError_t status = cudaStreamSynchronize(stream.get()); status != cudaSuccess) {
    deallocate_async(p, bytes, alignment, stream);
    detail::throw_cuda_error(status, "cudaStreamSynchronize after a pmr allocate", __FILE__, __LINE__);
  }
  return p;
}

void stream_ordered_resource::do_deallocate(void* p, std::size_t bytes, std::size_t alignment) {
  if (bytes == 0) return;  // the pointer of a zero-byte pmr allocate owns nothing
  deallocate_async(p, bytes, alignment, own_bound_stream());
}

void stream_ordered_resource::trim(stream_ref stream) {
  if (detail::stream_ordering_for(kind()).is_capturing(stream))
    throw std::invalid_argument(fmt::format("trim on stream {} of {}: the stream is being captured into a graph, where "
                                            "the frees would become graph nodes; trim on another stream",
                                            fmt::ptr(stream.get()), description()));
  do_trim(stream);
}

resource_state stream_ordered_resource::state() const {
  resource_state state;
  // Its own part of the description: "caching_resource" of "caching_resource over ...".
  state.name = description();
  if (const std::size_t over = state.name.find(" over "); over != std::string::npos) state.name.resize(over);
  state.kind = kind();
  state.device = device_id();
  try {
    do_report(state);
  } catch (const std::bad_alloc&) {
    throw;
  } catch (...) {  // counters CUDA will not give (a lost device): listed by name only
  }
  return state;
}

namespace detail {

void throw_invalid_alignment(std::size_t alignment, std::size_t bytes) {
  if (!std::has_single_bit(alignment))
    throw std::invalid_argument(
        fmt::format("alignment {} (for {} bytes) is not a power of two", alignment, bytes));
  throw std::invalid_argument(fmt::format("alignment {} (for {} bytes) exceeds the largest supported alignment {}",
                                          alignment, bytes, max_alignment));
}

}  // namespace detail
}  // namespace cudapmr
