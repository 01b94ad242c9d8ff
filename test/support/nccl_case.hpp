// SPDX-License-Identifier: Apache-2.0
#pragma once
// The contract's case for nccl_memory_resource, where the build found NCCL
// (CUDAPMR_TESTS_HAVE_NCCL).

#include <gtest/gtest.h>

#if CUDAPMR_TESTS_HAVE_NCCL
#include <cudapmr/nccl/memory_resource.hpp>

#include <cstddef>
#include <memory>
#endif

namespace cudapmr::test {

#if CUDAPMR_TESTS_HAVE_NCCL
struct nccl_case {
  static constexpr const char* name = "nccl";
  static constexpr bool needs_gpu = true;
  static std::unique_ptr<stream_ordered_resource> make() { return std::make_unique<nccl_memory_resource>(0); }
  static std::size_t exhausting_request() { return std::size_t{1} << 50; }
};

template <class List>
struct append_nccl_case;
template <class... Cases>
struct append_nccl_case<::testing::Types<Cases...>> {
  using type = ::testing::Types<Cases..., nccl_case>;
};
/// `List` and the nccl case.
template <class List>
using with_nccl_case = typename append_nccl_case<List>::type;
#else
/// `List` alone: this build has no NCCL.
template <class List>
using with_nccl_case = List;
#endif

}  // namespace cudapmr::test
