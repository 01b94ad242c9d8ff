// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/detail/buffer_operations.hpp"
#include "cudapmr/detail/cuda_check.hpp"

#include "cudapmr/detail/peer_copy.hpp"
#include "cudapmr/detail/staged_copy.hpp"
#include "cudapmr/device.hpp"
#include "cudapmr/error.hpp"
#include "cudapmr/sanitizer_annotations.hpp"

#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <stdexcept>

namespace cudapmr::detail {

std::size_t checked_byte_count(std::size_t count, std::size_t element_size) {
  if (element_size != 0 && count > std::numeric_limits<std::size_t>::max() / element_size)
    throw std::invalid_argument(fmt::format("buffer of {} elements of {} bytes: the byte count overflows size_t",
                                            count, element_size));
  return count * element_size;
}

void check_copy_sizes(const char* operation, std::size_t destination_count, std::size_t source_count,
                      std::size_t element_size) {
  if (destination_count != source_count)
    throw std::invalid_argument(fmt::format(
        "{}: size mismatch: the destination holds {} elements ({} bytes) but the source holds {} ({} bytes)",
        operation, destination_count, destination_count * element_size, source_count, source_count * element_size));
}

void throw_closed_buffer(const char* operation) {
  throw std::invalid_argument(fmt::format("{}: the buffer is closed or moved-from and owns no memory", operation));
}

void copy_bytes(void* destination, copy_end to, const void* source, copy_end from, std::size_t bytes,
                stream_ref stream) {
  if (bytes == 0) return;
  const bool to_pageable = to.kind == memory_kind::pageable;
  const bool from_pageable = from.kind == memory_kind::pageable;
  if (to_pageable && from_pageable) {
    std::memcpy(destination, source, bytes);
    return;
  }
  // Large copies between pageable host memory and device or managed memory go
  // through pinned staging, several times faster than the driver's pageable path.
  if (to_pageable != from_pageable &&
      try_staged_copy(destination, source, bytes, from_pageable ? copy_direction::to_device : copy_direction::to_host,
                      stream))
    return;
  // Device memory of two devices: peer to peer where they reach each other, staged otherwise.
  if (to.kind == memory_kind::device && from.kind == memory_kind::device && to.device != from.device) {
    copy_between_devices(destination, to.device, source, from.device, bytes, stream,
                         route_between_devices(to.device, from.device));
    return;
  }
  detail::check_cuda(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDefault, stream.get()), [&] {
    return fmt::format("cudaMemcpyAsync of {} bytes from {} to {} on stream {}", bytes, fmt::ptr(source),
                       fmt::ptr(destination), fmt::ptr(stream.get()));
  });
  // Between host ends the driver copies with the CPU, out of initcheck's sight.
  if (to.kind == memory_kind::pinned && (from_pageable || from.kind == memory_kind::pinned))
    mark_initialized(destination, bytes, stream);
}

void fill_pattern(void* destination, std::size_t count, const void* value, std::size_t value_bytes,
                  memory_kind kind, stream_ref stream) {
  if (count == 0) return;
  auto* bytes = static_cast<unsigned char*>(destination);
  if (kind == memory_kind::pageable) {
    for (std::size_t i = 0; i < count; ++i) std::memcpy(bytes + i * value_bytes, value, value_bytes);
    return;
  }
  // A pattern of one repeated byte (zero, most often) is a plain memset.
  const auto* pattern = static_cast<const unsigned char*>(value);
  bool one_byte = true;
  for (std::size_t i = 1; i < value_bytes; ++i) one_byte = one_byte && pattern[i] == pattern[0];
  if (one_byte) {
    CUDAPMR_CHECK(cudaMemsetAsync(destination, pattern[0], count * value_bytes, stream.get()));
    return;
  }
  const scoped_device on_stream_device(stream_device(stream));  // a kernel launches only on the current device
  launch_fill_kernel(destination, count, value, value_bytes, stream);
}

}  // namespace cudapmr::detail
