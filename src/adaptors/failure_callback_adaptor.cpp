// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/adaptors/failure_callback_adaptor.hpp"

#include "cudapmr/detail/call_stack.hpp"

#include <stdexcept>
#include <utility>

namespace cudapmr {

failure_callback_adaptor::failure_callback_adaptor(stream_ordered_resource& upstream, failure_callback callback)
    : resource_adaptor(upstream), callback_(std::move(callback)) {
  if (!callback_)
    throw std::invalid_argument("failure_callback_adaptor over " + upstream.description() + ": the callback is empty");
}

void* failure_callback_adaptor::do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) {
  for (std::size_t attempt = 1;; ++attempt) {
    try {
      return upstream_resource().allocate_async(bytes, alignment, stream);
    } catch (const out_of_memory& error) {
      bool again = false;
      {
        const detail::call_site_suspension user_code;  // what the callback allocates records its own call site
        again = callback_(allocation_failure{bytes, alignment, stream, attempt, error});
      }
      if (!again) throw;
    }
  }
}

}  // namespace cudapmr
