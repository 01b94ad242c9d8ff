// SPDX-License-Identifier: Apache-2.0
// Compiled into the library, so that a program can tell which library it linked.
#include "cudapmr/version.hpp"

namespace cudapmr {

version_number version() noexcept { return header_version; }

std::string_view version_string() noexcept { return CUDAPMR_VERSION_STRING; }

}  // namespace cudapmr
