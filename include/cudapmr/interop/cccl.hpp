// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file cccl.hpp
/// cudapmr resources as stream-ordered resources of CCCL's `cuda::mr`, so that
/// CCCL's resource references and code written against them draw from them:
/// the CCCL of CUDA 13.0 (`async_resource_ref`, `allocate_async`) and
/// CCCL 3.1 and later (`resource_ref` stream-ordered, `synchronous_resource_ref`,
/// `allocate(stream, ...)`, `allocate_sync`). `cccl_stream_ordered_ref` and
/// `cccl_synchronous_ref` name the reference types of either.
///
/// That CCCL hides `cuda::mr` behind LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE,
/// which this header defines; include it before anything else includes
/// `<cuda/memory_resource>`, or define the macro for the whole project.

#ifndef LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#  ifdef _CUDA__MEMORY_RESOURCE_RESOURCE_H
#    error "<cuda/memory_resource> was included before <cudapmr/interop/cccl.hpp> without LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE: include cudapmr/interop/cccl.hpp first or define the macro project-wide"
#  endif
#  define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#endif

#include "cudapmr/adaptors/resource_adaptor.hpp"
#include "cudapmr/device_memory_resource.hpp"
#include "cudapmr/host_memory_resource.hpp"
#include "cudapmr/managed_memory_resource.hpp"
#include "cudapmr/memory_kind.hpp"
#include "cudapmr/pinned_memory_resource.hpp"
#include "cudapmr/stream_ordered_resource.hpp"

#include <cuda/memory_resource>

#include <cstddef>

namespace cudapmr {

#if CCCL_VERSION >= 3001000
/// CCCL's concepts of a stream-ordered resource (with properties) and of a synchronous one.
template <class Resource, class... Properties>
concept cccl_stream_ordered_resource_with = ::cuda::mr::resource_with<Resource, Properties...>;
template <class Resource>
concept cccl_synchronous_resource = ::cuda::mr::synchronous_resource<Resource>;
/// CCCL's stream-ordered resource reference: `cuda::mr::resource_ref` since CCCL 3.1.
template <class... Properties>
using cccl_stream_ordered_ref = ::cuda::mr::resource_ref<Properties...>;
/// CCCL's synchronous resource reference: `cuda::mr::synchronous_resource_ref` since CCCL 3.1.
template <class... Properties>
using cccl_synchronous_ref = ::cuda::mr::synchronous_resource_ref<Properties...>;
#else
/// CCCL's concepts of a stream-ordered resource (with properties) and of a synchronous one.
template <class Resource, class... Properties>
concept cccl_stream_ordered_resource_with = ::cuda::mr::async_resource_with<Resource, Properties...>;
template <class Resource>
concept cccl_synchronous_resource = ::cuda::mr::resource<Resource>;
/// CCCL's stream-ordered resource reference: `cuda::mr::async_resource_ref` before CCCL 3.1.
template <class... Properties>
using cccl_stream_ordered_ref = ::cuda::mr::async_resource_ref<Properties...>;
/// CCCL's synchronous resource reference: `cuda::mr::resource_ref` before CCCL 3.1.
template <class... Properties>
using cccl_synchronous_ref = ::cuda::mr::resource_ref<Properties...>;
#endif

// Every stream_ordered_resource (adaptors included) already has the members
// CCCL's concepts ask for, under both CCCLs' names: allocate/deallocate(bytes,
// alignment) and allocate_sync, which are synchronous, allocate_async and
// allocate(stream, ...), and equality. CCCL 3.1 and later reference only
// copyable resources: there, reference a cccl_resource over one. What the
// type alone cannot say is who may touch the memory, since that is the
// resource's runtime kind. The concrete kinds fix it in their type, so they
// declare the properties below; any other resource goes through cccl_resource.

/// Device memory is device-accessible only.
inline void get_property(const device_memory_resource&, ::cuda::mr::device_accessible) noexcept {}
/// Pinned memory is accessible from the host and every device.
inline void get_property(const pinned_memory_resource&, ::cuda::mr::device_accessible) noexcept {}
inline void get_property(const pinned_memory_resource&, ::cuda::mr::host_accessible) noexcept {}
/// Managed memory is accessible from the host and every device.
inline void get_property(const managed_memory_resource&, ::cuda::mr::device_accessible) noexcept {}
inline void get_property(const managed_memory_resource&, ::cuda::mr::host_accessible) noexcept {}
/// Pageable memory is host-accessible only.
inline void get_property(const host_memory_resource&, ::cuda::mr::host_accessible) noexcept {}

namespace detail {
/// \throws std::invalid_argument naming the resource and both kinds unless `resource.kind() == expected`.
void require_kind(const stream_ordered_resource& resource, memory_kind expected);
}  // namespace detail

/// A non-owning reference to any stream_ordered_resource whose kind is
/// `Kind`, checked once at construction, that carries that kind's CCCL
/// properties (`device_accessible`, `host_accessible`) in its type. It models
/// CCCL 3.0's `cuda::mr::async_resource` and also offers the newer CCCL
/// names (`allocate(stream, ...)`, `allocate_sync`). The resource must outlive it.
template <memory_kind Kind>
class cccl_resource {
 public:
  static constexpr memory_kind kind = Kind;

  /// \throws std::invalid_argument if `resource.kind()` is not `Kind`.
  explicit cccl_resource(stream_ordered_resource& resource) : resource_(&resource) {
    detail::require_kind(resource, Kind);
  }

  /// Synchronous allocation (the resource's pmr `allocate`): usable at once on
  /// every stream. \throws as stream_ordered_resource::allocate_async.
  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
    return resource_->allocate(bytes, alignment);
  }
  /// Frees memory from `allocate`, ordered on the resource's bound stream. Never throws.
  void deallocate(void* p, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
    resource_->deallocate(p, bytes, alignment);
  }
  /// Allocates in stream order on `stream`. \throws as stream_ordered_resource::allocate_async.
  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) {
    return resource_->allocate_async(bytes, alignment, stream);
  }
  /// Frees in stream order on `stream`. Never throws.
  void deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept {
    resource_->deallocate_async(p, bytes, alignment, stream);
  }

  /// The newer CCCL spelling of allocate_async: the stream comes first.
  [[nodiscard]] void* allocate(stream_ref stream, std::size_t bytes, std::size_t alignment = default_alignment) {
    return allocate_async(bytes, alignment, stream);
  }
  /// The newer CCCL spelling of deallocate_async. Never throws.
  void deallocate(stream_ref stream, void* p, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
    deallocate_async(p, bytes, alignment, stream);
  }
  /// The newer CCCL name of the synchronous allocate.
  [[nodiscard]] void* allocate_sync(std::size_t bytes, std::size_t alignment = default_alignment) {
    return allocate(bytes, alignment);
  }
  /// The newer CCCL name of the synchronous deallocate. Never throws.
  void deallocate_sync(void* p, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
    deallocate(p, bytes, alignment);
  }

  /// The resource referred to.
  [[nodiscard]] stream_ordered_resource& resource() const noexcept { return *resource_; }

  /// Equal when the resources are equal (pool resources: the same pool).
  friend bool operator==(const cccl_resource& left, const cccl_resource& right) noexcept {
    return left.resource_->is_equal(*right.resource_);
  }

  friend void get_property(const cccl_resource&, ::cuda::mr::device_accessible) noexcept
    requires(cudapmr::is_device_accessible(Kind))
  {}
  friend void get_property(const cccl_resource&, ::cuda::mr::host_accessible) noexcept
    requires(cudapmr::is_host_accessible(Kind))
  {}

 private:
  stream_ordered_resource* resource_;
};

using cccl_device_resource = cccl_resource<memory_kind::device>;
using cccl_pinned_resource = cccl_resource<memory_kind::pinned>;
using cccl_managed_resource = cccl_resource<memory_kind::managed>;
using cccl_pageable_resource = cccl_resource<memory_kind::pageable>;

// The promises of this header, checked where it is compiled.
static_assert(cccl_stream_ordered_resource_with<stream_ordered_resource>);
static_assert(cccl_stream_ordered_resource_with<resource_adaptor>);
static_assert(cccl_synchronous_resource<stream_ordered_resource>);
static_assert(cccl_stream_ordered_resource_with<device_memory_resource, ::cuda::mr::device_accessible>);
static_assert(!::cuda::has_property<device_memory_resource, ::cuda::mr::host_accessible>);
static_assert(cccl_stream_ordered_resource_with<pinned_memory_resource, ::cuda::mr::device_accessible,
                                                ::cuda::mr::host_accessible>);
static_assert(cccl_stream_ordered_resource_with<managed_memory_resource, ::cuda::mr::device_accessible,
                                                ::cuda::mr::host_accessible>);
static_assert(cccl_stream_ordered_resource_with<host_memory_resource, ::cuda::mr::host_accessible>);
static_assert(!::cuda::has_property<host_memory_resource, ::cuda::mr::device_accessible>);
static_assert(cccl_stream_ordered_resource_with<cccl_device_resource, ::cuda::mr::device_accessible>);
static_assert(!::cuda::has_property<cccl_device_resource, ::cuda::mr::host_accessible>);
static_assert(cccl_stream_ordered_resource_with<cccl_pinned_resource, ::cuda::mr::device_accessible,
                                                ::cuda::mr::host_accessible>);
static_assert(cccl_stream_ordered_resource_with<cccl_managed_resource, ::cuda::mr::device_accessible,
                                                ::cuda::mr::host_accessible>);
static_assert(cccl_stream_ordered_resource_with<cccl_pageable_resource, ::cuda::mr::host_accessible>);
static_assert(!::cuda::has_property<cccl_pageable_resource, ::cuda::mr::device_accessible>);

}  // namespace cudapmr
