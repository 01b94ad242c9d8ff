// mark_initialized only talks to a tool that is listening; without one (as
// here, outside compute-sanitizer) it must leave memory and streams alone.
// Under compute-sanitizer's initcheck the suite's own runs are its real test:
// test/run_sanitizers.sh reports zero errors only because host stores into
// pooled memory are marked.
#include <cudapmr/sanitizer_annotations.hpp>

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <span>

namespace cudapmr::test {
namespace {

TEST(SanitizerAnnotations, MarkingLeavesTheBytesAsTheyAre) {
  std::array<std::uint32_t, 64> words{};
  for (std::uint32_t i = 0; i < words.size(); ++i) words[i] = 0xc0ffee00u + i;
  mark_initialized(std::span(words), stream_ref{});
  mark_initialized(words.data(), sizeof(words), stream_ref{});
  for (std::uint32_t i = 0; i < words.size(); ++i) ASSERT_EQ(words[i], 0xc0ffee00u + i) << i;
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
