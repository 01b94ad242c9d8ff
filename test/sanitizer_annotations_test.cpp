// SPDX-License-Identifier: Apache-2.0
// mark_initialized with no tool listening (CI, a plain run) must leave memory
// alone. Under compute-sanitizer (test/run_sanitizers.sh) the tool must accept
// the ranges, since it counts a refused one as an error, and initcheck's zero
// over the suite, the demo and the stress run shows the marks take effect.
//
// MemcheckSeesCachedBlocks provokes kernels that use memory their owner freed
// through a cache. memcheck sees a use after free only of memory freed to CUDA
// (it refuses NVTX heaps over pool memory), so with CUDAPMR_NO_CACHING=1 the
// caches keep nothing. The tests are disabled in the suite; test/run_sanitizers.sh
// runs each alone under memcheck, with the variable set, and expects a report.
#include "support/gpu.hpp"

#include <cudapmr/adaptors/caching_resource.hpp>
#include <cudapmr/device_memory_resource.hpp>
#include <cudapmr/host_memory_resource.hpp>
#include <cudapmr/pinned_memory_resource.hpp>
#include <cudapmr/sanitizer_annotations.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace cudapmr::test {
namespace {

TEST(SanitizerAnnotations, MarkingLeavesTheBytesAsTheyAre) {
  // The tool accepts only memory CUDA allocated: pinned where there is a GPU,
  // pageable memory (which only a tool would refuse) where there is none.
  std::optional<pinned_memory_resource> pinned;
  if (gpu_available()) pinned.emplace();
  host_memory_resource pageable;
  stream_ordered_resource& resource = pinned ? static_cast<stream_ordered_resource&>(*pinned) : pageable;
  constexpr std::size_t count = 64;
  auto* words = static_cast<std::uint32_t*>(resource.allocate(count * sizeof(std::uint32_t)));
  for (std::uint32_t i = 0; i < count; ++i) words[i] = 0xc0ffee00u + i;
  mark_initialized(std::span(words, count), stream_ref{});
  mark_initialized(words, count * sizeof(std::uint32_t), stream_ref{});
  for (std::uint32_t i = 0; i < count; ++i) EXPECT_EQ(words[i], 0xc0ffee00u + i) << i;
  resource.deallocate(words, count * sizeof(std::uint32_t));
}

TEST(SanitizerAnnotations, NullAndEmptyRangesAreIgnored) {
  mark_initialized(nullptr, 128, stream_ref{});
  std::uint32_t word = 7;
  mark_initialized(&word, 0, stream_ref{});
  mark_initialized(std::span<std::uint32_t>(), stream_ref{});
  EXPECT_EQ(word, 7u);
}

constexpr const char* run_with_caching_off = "run with CUDAPMR_NO_CACHING=1, so that the free reaches CUDA";

TEST(MemcheckSeesCachedBlocks, DISABLED_AKernelWritingAPoolBlockFreedThroughTheCache) {
  CUDAPMR_REQUIRE_GPU();
  constexpr std::size_t bytes = std::size_t{1} << 20;
  device_memory_resource pool(0);
  caching_resource cache(pool);
  const stream work(0);
  auto* words = static_cast<std::uint32_t*>(cache.allocate_async(bytes, work));
  cache.deallocate_async(words, bytes, work);
  ASSERT_EQ(cache.statistics().cached_bytes, 0u) << run_with_caching_off;
  write_sequence(words, 1024, 1, work);  // use after free: memcheck reports it
  static_cast<void>(cudaStreamSynchronize(work.get()));  // under memcheck the kernel fails
}

TEST(MemcheckSeesCachedBlocks, DISABLED_AKernelWritingAPinnedBlockFreedThroughThePmrPath) {
  CUDAPMR_REQUIRE_GPU();
  constexpr std::size_t bytes = std::size_t{64} << 10;
  caching_resource& pinned = default_pinned_resource();  // the pmr path's cache
  auto* words = static_cast<std::uint32_t*>(pinned.allocate(bytes));
  pinned.deallocate(words, bytes);
  ASSERT_EQ(pinned.statistics().cached_bytes, 0u) << run_with_caching_off;
  const stream work(0);
  write_sequence(words, 1024, 1, work);  // use after free: memcheck reports it
  static_cast<void>(cudaStreamSynchronize(work.get()));  // under memcheck the kernel fails
}

}  // namespace
}  // namespace cudapmr::test
