// SPDX-License-Identifier: Apache-2.0
// cccl.hpp: cudapmr resources behind CCCL's cuda::mr resource references.
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

using ::cuda::mr::async_resource_ref;
using ::cuda::mr::device_accessible;
using ::cuda::mr::host_accessible;
using ::cuda::mr::resource_ref;

TEST(Cccl, AsyncResourceRefAllocatesAndFreesThroughTheHostResource) {
  host_memory_resource host;
  async_resource_ref<host_accessible> ref{host};
  void* p = ref.allocate_async(1000, 64, stream_ref{});
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(host.used_bytes(), 1000u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u);
  std::memset(p, 0x5a, 1000);
  ref.deallocate_async(p, 1000, 64, stream_ref{});
  EXPECT_EQ(host.used_bytes(), 0u);
}

TEST(Cccl, SynchronousResourceRefAllocatesAndFreesThroughTheHostResource) {
  host_memory_resource host;
  resource_ref<host_accessible> ref{host};
  void* p = ref.allocate(4096, 256);
  EXPECT_EQ(host.used_bytes(), 4096u);
  ref.deallocate(p, 4096, 256);
  EXPECT_EQ(host.used_bytes(), 0u);
}

TEST(Cccl, TypedReferenceCarriesAnyResourceOfItsKind) {
  host_memory_resource host;
  stream_ordered_resource& any = host;  // as an adaptor or a base reference would be seen
  cccl_pageable_resource typed(any);
  async_resource_ref<host_accessible> ref{typed};
  void* p = ref.allocate_async(512, stream_ref{});
  EXPECT_EQ(host.used_bytes(), 512u);
  ref.deallocate_async(p, 512, stream_ref{});
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
  void* ordered = typed.allocate(stream_ref{}, 300, 128);
  void* synchronous = typed.allocate_sync(200);
  EXPECT_EQ(host.used_bytes(), 500u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(ordered) % 128, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(synchronous) % default_alignment, 0u);
  typed.deallocate(stream_ref{}, ordered, 300, 128);
  typed.deallocate_sync(synchronous, 200);
  EXPECT_EQ(host.used_bytes(), 0u);
}

TEST(Cccl, ReferencesCompareByTheResourceTheyReferTo) {
  host_memory_resource host, other;
  EXPECT_TRUE(cccl_pageable_resource(host) == cccl_pageable_resource(host));
  EXPECT_FALSE(cccl_pageable_resource(host) == cccl_pageable_resource(other));
  const async_resource_ref<host_accessible> first{host};
  const async_resource_ref<host_accessible> second{host};
  const async_resource_ref<host_accessible> third{other};
  EXPECT_TRUE(first == second);
  EXPECT_FALSE(first == third);
}

/// Allocates `words` through `ref` on `stream`, writes and checks them with kernels, and frees them.
template <class Ref>
void expect_device_usable(Ref ref, stream_ref stream) {
  constexpr std::size_t words = 1 << 20;
  auto* p = static_cast<std::uint32_t*>(ref.allocate_async(words * sizeof(std::uint32_t), 256, stream));
  ASSERT_NE(p, nullptr);
  write_sequence(p, words, 42, stream);
  EXPECT_EQ(count_sequence_mismatches(p, words, 42, stream), 0u);
  ref.deallocate_async(p, words * sizeof(std::uint32_t), 256, stream);
}

TEST(Cccl, AsyncResourceRefDrawsDeviceMemoryFromADevicePool) {
  CUDAPMR_REQUIRE_GPU();
  device_memory_resource pool(0, device_pool_options{});
  const cudapmr::stream stream(0);
  expect_device_usable(async_resource_ref<device_accessible>{pool}, stream);
  stream.synchronize();
  EXPECT_EQ(pool.stats().used_current, 0u);
  EXPECT_GT(pool.stats().used_high, 0u) << "the reference did not draw from the pool";
}

TEST(Cccl, AsyncResourceRefDrawsFromPinnedAndManagedPools) {
  CUDAPMR_REQUIRE_GPU();
  pinned_memory_resource pinned(pinned_pool_options{});
  managed_memory_resource managed(managed_pool_options{.preferred_device = 0});
  const cudapmr::stream stream(0);
  expect_device_usable(async_resource_ref<device_accessible, host_accessible>{pinned}, stream);
  expect_device_usable(async_resource_ref<host_accessible, device_accessible>{managed}, stream);
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
  expect_device_usable(async_resource_ref<device_accessible>{typed}, stream);
  stream.synchronize();
  EXPECT_GT(pool.stats().used_high, 0u);
}

}  // namespace
}  // namespace cudapmr::test
