// SPDX-License-Identifier: Apache-2.0
// version.hpp: the headers and the library agree on the project version.
#include <cudapmr/version.hpp>

#include <gtest/gtest.h>

#include <string>

namespace cudapmr::test {
namespace {

TEST(Version, LibraryMatchesTheHeaders) {
  EXPECT_EQ(version(), header_version);
  EXPECT_EQ(version_string(), CUDAPMR_VERSION_STRING);
  const version_number number = version();
  EXPECT_EQ(std::string(version_string()),
            std::to_string(number.major) + "." + std::to_string(number.minor) + "." + std::to_string(number.patch));
}

}  // namespace
}  // namespace cudapmr::test
