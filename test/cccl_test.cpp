// SPDX-License-Identifier: Apache-2.0
// cccl.hpp: cudapmr resources behind CCCL's cuda::mr resource references, under
// the names of the CCCL it is compiled against (CUDA 13.0's, and in CI the
// newer one of the nvidia-cuda-cccl wheel).
#include "support/gpu.hpp"

#include <cudapmr/interop/cccl.hpp>
#include <cudapmr/device_memory_resource.hpp>
#include <cudapmr/host_memory_resource.hpp>
#include <cudapmr/managed_memory_resource.hpp>
#include <cudapmr/pinned_memory_resource.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace cudapmr::test {
namespace {

using ::cuda::mr::device_accessible;
using ::cuda::mr::host_accessible;

/// The null stream, spelled as newer CCCL asks (its default stream_ref is deprecated).
const stream_ref null_stream{cudaStream_t{}};

#if CCCL_VERSION >= 3001000
// CCCL 3.1 and later reference only copyable resources: a cccl_resource over one.
inline cccl_pageable_resource referable(host_memory_resource& resource) { return cccl_pageable_resource(resource); }
inline cccl_device_resource referable(device_memory_resource& resource) { return cccl_device_resource(resource); }
inline cccl_pinned_resource referable(pinned_memory_resource& resource) { return cccl_pinned_resource(resource); }
inline cccl_managed_resource referable(managed_memory_resource& resource) { return cccl_managed_resource(resource); }
#else
// CUDA 13.0's CCCL references the resource itself.
template <class Resource>
Resource& referable(Resource& resource) {
  return resource;
}
#endif

/// A stream-ordered allocation and free through a reference, in this CCCL's spelling.
template <class Ref>
void* ordered_allocate(Ref& ref, std::size_t bytes, std::size_t alignment, stream_ref stream) {
#if CCCL_VERSION >= 3001000
  return ref.allocate(stream, bytes, alignment);
#else
  return ref.allocate_async(bytes, alignment, stream);
#endif
}
template <class Ref>
void ordered_deallocate(Ref& ref, void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) {
#if CCCL_VERSION >= 3001000
  ref.deallocate(stream, p, bytes, alignment);
#else
  ref.deallocate_async(p, bytes, alignment, stream);
#endif
}
/// A synchronous allocation and free through a reference, in this CCCL's spelling.
template <class Ref>
void* synchronous_allocate(Ref& ref, std::size_t bytes, std::size_t alignment) {
#if CCCL_VERSION >= 3001000
  return ref.allocate_sync(bytes, alignment);
#else
  return ref.allocate(bytes, alignment);
#endif
}
template <class Ref>
void synchronous_deallocate(Ref& ref, void* p, std::size_t bytes, std::size_t alignment) {
#if CCCL_VERSION >= 3001000
  ref.deallocate_sync(p, bytes, alignment);
#else
  ref.deallocate(p, bytes, alignment);
#endif
}

TEST(Cccl, AsyncResourceRefAllocatesAndFreesThroughTheHostResource) {
  host_memory_resource host;
  auto&& target = referable(host);
  cccl_stream_ordered_ref<host_accessible> ref{target};
  void* p = ordered_allocate(ref, 1000, 64, null_stream);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(host.used_bytes(), 1000u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u);
  std::memset(p, 0x5a, 1000);
  ordered_deallocate(ref, p, 1000, 64, null_stream);
  EXPECT_EQ(host.used_bytes(), 0u);
}

TEST(Cccl, SynchronousResourceRefAllocatesAndFreesThroughTheHostResource) {
  host_memory_resource host;
  auto&& target = referable(host);
  cccl_synchronous_ref<host_accessible> ref{target};
  void* p = synchronous_allocate(ref, 4096, 256);
  EXPECT_EQ(host.used_bytes(), 4096u);
  synchronous_deallocate(ref, p, 4096, 256);
  EXPECT_EQ(host.used_bytes(), 0u);
}

TEST(Cccl, TypedReferenceCarriesAnyResourceOfItsKind) {
  host_memory_resource host;
  stream_ordered_resource& any = host;  // as an adaptor or a base reference would be seen
  cccl_pageable_resource typed(any);
  cccl_stream_ordered_ref<host_accessible> ref{typed};
  void* p = ordered_allocate(ref, 512, default_alignment, null_stream);
  EXPECT_EQ(host.used_bytes(), 512u);
  ordered_deallocate(ref, p, 512, default_alignment, null_stream);
  EXPECT_EQ(host.used_bytes(), 0u);
  EXPECT_EQ(&typed.resource(), &host);
}

TEST(Cccl, TypedReferenceRefusesAResourceOfAnotherKind) {
  host_memory_resource host;
  try {
    const cccl_device_resource typed(host);
    ADD_FAILURE() << "a pageable resource was taken as device memory";
  } catch (const std::invalid_argument& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("memory_kind::device"), std::string::npos) << message;
    EXPECT_NE(message.find("pageable"), std::string::npos) << message;
    EXPECT_NE(message.find("host_memory_resource"), std::string::npos) << message;
  }
}

TEST(Cccl, NewerCcclNamesMapOntoTheSameCalls) {
  host_memory_resource host;
  cccl_pageable_resource typed(host);
  void* ordered = typed.allocate(null_stream, 300, 128);
  void* synchronous = typed.allocate_sync(200);
  EXPECT_EQ(host.used_bytes(), 500u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(ordered) % 128, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(synchronous) % default_alignment, 0u);
  typed.deallocate(null_stream, ordered, 300, 128);
  typed.deallocate_sync(synchronous, 200);
  EXPECT_EQ(host.used_bytes(), 0u);
}

TEST(Cccl, ReferencesCompareByTheResourceTheyReferTo) {
  host_memory_resource host, other;
  EXPECT_TRUE(cccl_pageable_resource(host) == cccl_pageable_resource(host));
  EXPECT_FALSE(cccl_pageable_resource(host) == cccl_pageable_resource(other));
  auto&& host_target = referable(host);
  auto&& host_again = referable(host);
  auto&& other_target = referable(other);
  const cccl_stream_ordered_ref<host_accessible> first{host_target};
  const cccl_stream_ordered_ref<host_accessible> second{host_again};
  const cccl_stream_ordered_ref<host_accessible> third{other_target};
  EXPECT_TRUE(first == second);
  EXPECT_FALSE(first == third);
}

/// Allocates `words` through `ref` on `stream`, writes and checks them with kernels, and frees them.
template <class Ref>
void expect_device_usable(Ref ref, stream_ref stream) {
  constexpr std::size_t words = 1 << 20;
  auto* p = static_cast<std::uint32_t*>(ordered_allocate(ref, words * sizeof(std::uint32_t), 256, stream));
  ASSERT_NE(p, nullptr);
  write_sequence(p, words, 42, stream);
  EXPECT_EQ(count_sequence_mismatches(p, words, 42, stream), 0u);
  ordered_deallocate(ref, p, words * sizeof(std::uint32_t), 256, stream);
}

TEST(Cccl, AsyncResourceRefDrawsDeviceMemoryFromADevicePool) {
  CUDAPMR_REQUIRE_GPU();
  device_memory_resource pool(0, device_pool_options{});
  const cudapmr::stream stream(0);
  auto&& target = referable(pool);
  expect_device_usable(cccl_stream_ordered_ref<device_accessible>{target}, stream);
  stream.synchronize();
  EXPECT_EQ(pool.stats().used_current, 0u);
  EXPECT_GT(pool.stats().used_high, 0u) << "the reference did not draw from the pool";
}

TEST(Cccl, AsyncResourceRefDrawsFromPinnedAndManagedPools) {
  CUDAPMR_REQUIRE_GPU();
  pinned_memory_resource pinned(pinned_pool_options{});
  managed_memory_resource managed(managed_pool_options{.preferred_device = 0});
  const cudapmr::stream stream(0);
  auto&& pinned_target = referable(pinned);
  auto&& managed_target = referable(managed);
  expect_device_usable(cccl_stream_ordered_ref<device_accessible, host_accessible>{pinned_target}, stream);
  expect_device_usable(cccl_stream_ordered_ref<host_accessible, device_accessible>{managed_target}, stream);
  stream.synchronize();
  EXPECT_GT(pinned.stats().used_high, 0u);
  EXPECT_GT(managed.stats().used_high, 0u);
}

TEST(Cccl, TypedReferenceCarriesADeviceResourceSeenThroughItsBase) {
  CUDAPMR_REQUIRE_GPU();
  device_memory_resource pool(0, device_pool_options{});
  stream_ordered_resource& any = pool;
  cccl_device_resource typed(any);
  const cudapmr::stream stream(0);
  expect_device_usable(cccl_stream_ordered_ref<device_accessible>{typed}, stream);
  stream.synchronize();
  EXPECT_GT(pool.stats().used_high, 0u);
}

}  // namespace
}  // namespace cudapmr::test
