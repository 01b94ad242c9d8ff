// SPDX-License-Identifier: Apache-2.0
// What happens when things are destroyed in the wrong order: a buffer that
// outlives its resource leaks its memory with one message instead of calling
// into a dead object; a buffer that outlives its cudapmr::stream is freed on
// its resource's bound stream, after the stream waited for its work. The
// docs/reliability.md states the same; test/reliability runs the
// process-exit cases in child processes.
#include "support/resource_cases.hpp"

#include <cudapmr/adaptors/statistics_adaptor.hpp>
#include <cudapmr/detail/lifetime.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace cudapmr::test {
namespace {

cudaStream_t fake_stream(std::uintptr_t id) { return reinterpret_cast<cudaStream_t>(id * 0x1000 + 0x500000); }

TEST(Lifetime, ResourceIdentityDiesWithTheResourceAndIsNeverHandedOnAlive) {
  auto first = std::make_unique<host_memory_resource>();
  const detail::resource_identity identity = first->identity();
  EXPECT_TRUE(detail::is_live_resource(identity));
  first.reset();
  EXPECT_FALSE(detail::is_live_resource(identity));
  const host_memory_resource second;  // may take the same slot, never the same identity
  EXPECT_NE(second.identity(), identity);
  EXPECT_TRUE(detail::is_live_resource(second.identity()));
  EXPECT_FALSE(detail::is_live_resource(identity));
}

TEST(Lifetime, BufferClosedAfterItsResourceIsGoneLeaksWithOneMessage) {
  host_memory_resource upstream;
  auto adaptor = std::make_unique<statistics_adaptor>(upstream);
  buffer<int> orphan(*adaptor, 1000, stream_ref{});
  int* const data = orphan.data();
  const std::size_t abandoned = detail::abandoned_allocations();
  adaptor.reset();  // destroyed with a buffer still open

  ::testing::internal::CaptureStderr();
  orphan.close();
  const std::string message = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(orphan.is_open());
  EXPECT_EQ(detail::abandoned_allocations(), abandoned + 1);
  EXPECT_NE(message.find("4000 bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("outlived its resource"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), message.size() - 1) << "one line: " << message;

  // The upstream never heard of the close; the memory is still its own.
  EXPECT_EQ(upstream.used_bytes(), 4000u);
  upstream.deallocate_async(data, 4000, default_alignment, stream_ref{});
}

TEST(Lifetime, BufferOnADestroyedStreamIsFreedOnTheBoundStream) {
  host_memory_resource upstream;
  statistics_adaptor counted(upstream);
  const stream_ref gone(fake_stream(1));
  {
    buffer<int> values(counted, 256, gone);
    detail::retire_stream(gone.get());  // what ~cudapmr::stream does, after waiting for the stream
    EXPECT_TRUE(detail::is_retired_stream(gone));
  }
  EXPECT_EQ(counted.statistics(gone).bytes.current, 1024) << "nothing was freed on the destroyed stream";
  EXPECT_EQ(counted.statistics(counted.bound_stream()).bytes.current, -1024) << "the free went to the bound stream";
  EXPECT_EQ(counted.statistics().bytes.current, 0);
  EXPECT_EQ(upstream.used_bytes(), 0u);
  detail::adopt_stream(gone.get());
  EXPECT_FALSE(detail::is_retired_stream(gone));
}

TEST(Lifetime, StreamHandleTakenAgainIsUsedAsItIs) {
  host_memory_resource upstream;
  statistics_adaptor counted(upstream);
  const stream_ref reused(fake_stream(2));
  detail::retire_stream(reused.get());
  detail::adopt_stream(reused.get());  // a new cudapmr::stream got the same handle
  { const buffer<int> values(counted, 256, reused); }
  EXPECT_EQ(counted.statistics(reused).bytes.current, 0);
  EXPECT_EQ(counted.statistics(reused).allocations.total, 1);
}

TEST(Lifetime, StreamDestructorWaitsForItsWork) {
  CUDAPMR_REQUIRE_GPU();
  device_memory_resource pool(0, device_pool_options{});
  const std::size_t count = 64 * mebibyte;
  buffer<std::uint32_t> values(pool, count, pool.bound_stream());
  ASSERT_EQ(cudaStreamSynchronize(pool.bound_stream().get()), cudaSuccess);  // usable on any stream now
  cudaEvent_t done = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), cudaSuccess);
  {
    const cudapmr::stream busy(0);
    for (int i = 0; i < 8; ++i) write_sequence(values.data(), count, 5, busy);
    ASSERT_EQ(cudaEventRecord(done, busy.get()), cudaSuccess);
  }
  EXPECT_EQ(cudaEventQuery(done), cudaSuccess) << "the stream was destroyed before its work completed";
  EXPECT_EQ(cudaEventDestroy(done), cudaSuccess);
}

TEST(Lifetime, BufferOutlivingItsCudapmrStreamIsFreedSafely) {
  CUDAPMR_REQUIRE_GPU();
  device_memory_resource pool(0, device_pool_options{});
  {
    std::optional<cudapmr::stream> short_lived(std::in_place, 0);
    buffer<std::uint32_t> values(pool, mebibyte, *short_lived);
    write_sequence(values.data(), values.size(), 9, *short_lived);
    const cudaStream_t handle = short_lived->get();
    short_lived.reset();
    EXPECT_TRUE(detail::is_retired_stream(handle));
  }  // freed on the pool's bound stream
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(pool.bound_stream().get()), cudaSuccess);
  EXPECT_EQ(pool.stats().used_current, 0u);
}

TEST(Lifetime, PoolDestroyedWithAnOpenBufferLeaksItWithOneMessage) {
  CUDAPMR_REQUIRE_GPU();
  const cudapmr::stream stream(0);
  auto pool = std::make_unique<device_memory_resource>(0, device_pool_options{});
  buffer<float> orphan(*pool, 1024, stream);
  float* const data = orphan.data();
  const std::size_t abandoned = detail::abandoned_allocations();
  pool.reset();
  ::testing::internal::CaptureStderr();
  orphan.close();
  const std::string message = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(detail::abandoned_allocations(), abandoned + 1);
  EXPECT_NE(message.find("outlived its resource"), std::string::npos) << message;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  // CUDA keeps a destroyed pool until its last allocation is freed; the
  // caller may still free it directly (here, so that leak checks stay clean).
  EXPECT_EQ(cudaFreeAsync(data, stream.get()), cudaSuccess);
  stream.synchronize();
}

}  // namespace
}  // namespace cudapmr::test
