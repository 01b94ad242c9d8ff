// SPDX-License-Identifier: Apache-2.0
// mark_initialized with no tool listening (CI, a plain run) must leave memory
// alone. Under compute-sanitizer (test/run_sanitizers.sh) the tool must accept
// the ranges, since it counts a refused one as an error, and initcheck's zero
// over the suite, the demo and the stress run shows the marks take effect.
#include "support/gpu.hpp"

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

}  // namespace
}  // namespace cudapmr::test
