// SPDX-License-Identifier: Apache-2.0
// Prefetch and advice over managed memory: the managed resource's members and
// the work behind buffer<T>'s.
#include "cudapmr/detail/managed_operations.hpp"

#include "cudapmr/detail/cuda_check.hpp"
#include "cudapmr/detail/pointer_type.hpp"
#include "cudapmr/device.hpp"
#include "cudapmr/error.hpp"
#include "cudapmr/managed_memory_resource.hpp"

#include <fmt/format.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace cudapmr {
namespace detail {
namespace {

std::string describe(memory_location location) {
  return location.is_host() ? std::string("the host") : fmt::format("device {}", location.device_ordinal());
}

std::string_view describe(const std::optional<cudaMemoryType>& type) {
  if (!type) return "memory CUDA cannot identify";
  switch (*type) {
    case cudaMemoryTypeUnregistered: return "pageable host memory";
    case cudaMemoryTypeHost: return "pinned host memory";
    case cudaMemoryTypeDevice: return "device memory";
    case cudaMemoryTypeManaged: return "managed memory";
  }
  return "memory of an unknown type";
}

/// \throws std::invalid_argument unless the first and the last byte of the range are managed.
void require_managed_range(const void* p, std::size_t bytes, const char* operation) {
  const auto* first = static_cast<const unsigned char*>(p);
  for (const unsigned char* end : {first, first + bytes - 1}) {
    if (const std::optional<cudaMemoryType> type = pointer_memory_type(end); type != cudaMemoryTypeManaged)
      throw std::invalid_argument(fmt::format("{}: the {} bytes at {} are not managed memory: {} holds {}", operation,
                                              bytes, fmt::ptr(p), fmt::ptr(end), describe(type)));
  }
}

/// The CUDA form of `location`. \throws std::invalid_argument for a device that does not exist.
cudaMemLocation to_cuda(memory_location location) {
  cudaMemLocation cuda_location{};
  if (location.is_host()) {
    cuda_location.type = cudaMemLocationTypeHost;
  } else {
    validate_device_ordinal(location.device_ordinal());
    cuda_location.type = cudaMemLocationTypeDevice;
    cuda_location.id = location.device_ordinal();
  }
  return cuda_location;
}

cudaMemoryAdvise to_cuda(managed_advice advice) {
  switch (advice) {
    case managed_advice::set_read_mostly: return cudaMemAdviseSetReadMostly;
    case managed_advice::unset_read_mostly: return cudaMemAdviseUnsetReadMostly;
    case managed_advice::set_preferred_location: return cudaMemAdviseSetPreferredLocation;
    case managed_advice::unset_preferred_location: return cudaMemAdviseUnsetPreferredLocation;
    case managed_advice::set_accessed_by: return cudaMemAdviseSetAccessedBy;
    case managed_advice::unset_accessed_by: return cudaMemAdviseUnsetAccessedBy;
  }
  throw std::invalid_argument(fmt::format("managed advice {} is not one of managed_advice's values",
                                          static_cast<int>(advice)));
}

}  // namespace

void require_managed_kind(memory_kind kind, const char* operation) {
  if (kind != memory_kind::managed)
    throw std::invalid_argument(
        fmt::format("{} needs a managed buffer, but this buffer holds {} memory", operation, to_string(kind)));
}

void prefetch_managed(const void* p, std::size_t bytes, memory_location location, stream_ref stream,
                      const char* operation) {
  if (bytes == 0) return;
  require_managed_range(p, bytes, operation);
  check_cuda(cudaMemPrefetchAsync(p, bytes, to_cuda(location), 0, stream.get()), [&] {
    return fmt::format("cudaMemPrefetchAsync of {} bytes at {} to {} on stream {}", bytes, fmt::ptr(p),
                       describe(location), fmt::ptr(stream.get()));
  });
}

void advise_managed(const void* p, std::size_t bytes, managed_advice advice, memory_location location,
                    const char* operation) {
  if (bytes == 0) return;
  require_managed_range(p, bytes, operation);
  check_cuda(cudaMemAdvise(p, bytes, to_cuda(advice), to_cuda(location)), [&] {
    return fmt::format("cudaMemAdvise {} of {} bytes at {} for {}", to_string(advice), bytes, fmt::ptr(p),
                       describe(location));
  });
}

}  // namespace detail

void managed_memory_resource::prefetch_to_device(const void* p, std::size_t bytes, int device,
                                                 stream_ref stream) const {
  detail::prefetch_managed(p, bytes, memory_location::device(device), stream, "prefetch_to_device");
}

void managed_memory_resource::prefetch_to_host(const void* p, std::size_t bytes, stream_ref stream) const {
  detail::prefetch_managed(p, bytes, memory_location::host(), stream, "prefetch_to_host");
}

void managed_memory_resource::advise(const void* p, std::size_t bytes, managed_advice advice,
                                     memory_location location) const {
  detail::advise_managed(p, bytes, advice, location, "advise");
}

}  // namespace cudapmr
