// SPDX-License-Identifier: Apache-2.0
// The programs' one command-line grammar (apps/common/command_line.hpp):
// counts within ranges, sizes with binary units, messages that name the flag.
#include "command_line.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace cudapmr::test {
namespace {

using apps::parse_integer;
using apps::parse_size;
using apps::usage_error;

/// The message parse throws for `text`, or "" when it is accepted.
template <class Parse>
std::string refusal(Parse&& parse) {
  try {
    parse();
  } catch (const usage_error& error) {
    return error.what();
  }
  return "";
}

TEST(CommandLine, SizesAreBytesOrBinaryUnits) {
  EXPECT_EQ(parse_size("--size", "0"), 0u);
  EXPECT_EQ(parse_size("--size", "4096"), 4096u);
  EXPECT_EQ(parse_size("--size", "4KiB"), std::size_t{4} << 10);
  EXPECT_EQ(parse_size("--size", "1MiB"), std::size_t{1} << 20);
  EXPECT_EQ(parse_size("--size", "2GiB"), std::size_t{2} << 30);
  EXPECT_EQ(parse_size("--size", "1TiB"), std::size_t{1} << 40);
}

TEST(CommandLine, OtherSizeSpellingsAreRefusedNamingTheFlag) {
  for (const char* text : {"1KB", "1K", "1M", "1.5MiB", "-1", "KiB", "", "1 MiB", "MiB1", "0x10"})
    EXPECT_EQ(refusal([&] { static_cast<void>(parse_size("--size", text)); }),
              std::string("--size ") + text + ": not a size (bytes, or a whole number with KiB, MiB, GiB or TiB)")
        << text;
  EXPECT_EQ(refusal([] { static_cast<void>(parse_size("--size", "17179869184GiB")); }),
            "--size 17179869184GiB: out of range");
  EXPECT_EQ(refusal([] { static_cast<void>(parse_size("--size", "99999999999999999999")); }),
            "--size 99999999999999999999: out of range");
  EXPECT_EQ(refusal([] { static_cast<void>(parse_size("--size", "2GiB", 1, std::size_t{1} << 30)); }),
            "--size 2GiB: must be from 1 to 1073741824 bytes");
}

TEST(CommandLine, CountsAreWholeNumbersWithinTheirRange) {
  EXPECT_EQ(parse_integer<int>("--device", "3", 0, 8), 3);
  EXPECT_EQ(parse_integer<std::uint64_t>("--seed", "18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(refusal([] { static_cast<void>(parse_integer<int>("--device", "1KiB", 0, 1024)); }),
            "--device 1KiB: not an integer");
  EXPECT_EQ(refusal([] { static_cast<void>(parse_integer<std::size_t>("--elements", "-5")); }),
            "--elements -5: not a non-negative integer");
  EXPECT_EQ(refusal([] { static_cast<void>(parse_integer<int>("--threads", "0", 1, 1024)); }),
            "--threads 0: must be from 1 to 1024");
  EXPECT_EQ(refusal([] { static_cast<void>(parse_integer<int>("--gpus", "", 1, 4)); }), "--gpus : not an integer");
}

}  // namespace
}  // namespace cudapmr::test
