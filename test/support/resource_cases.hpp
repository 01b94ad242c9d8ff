// SPDX-License-Identifier: Apache-2.0
#pragma once
// The resources the shared contract runs over, one "case" type each; typed
// suites show the case type in every test name.

#include "support/gpu.hpp"
#include "support/nccl_case.hpp"  // the nccl case, where the build found NCCL

#include <cudapmr/cudapmr.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <utility>
#include <vector>

namespace cudapmr::test {

inline constexpr std::size_t mebibyte = std::size_t{1} << 20;
/// A request no machine can satisfy, for exhausting uncapped pools.
inline constexpr std::size_t impossible_request = std::size_t{1} << 50;

struct host_case {
  static constexpr const char* name = "host";
  static constexpr bool needs_gpu = false;
  static constexpr std::size_t capacity = 256 * mebibyte;
  static std::unique_ptr<stream_ordered_resource> make() { return std::make_unique<host_memory_resource>(capacity); }
  static std::size_t exhausting_request() { return capacity + 1; }
};

struct device_default_case {
  static constexpr const char* name = "device_default_pool";
  static constexpr bool needs_gpu = true;
  static std::unique_ptr<stream_ordered_resource> make() { return std::make_unique<device_memory_resource>(0); }
  static std::size_t exhausting_request() { return impossible_request; }
};

struct device_owned_case {
  static constexpr const char* name = "device_owned_pool";
  static constexpr bool needs_gpu = true;
  static constexpr std::size_t max_size = 256 * mebibyte;
  static std::unique_ptr<stream_ordered_resource> make() {
    return std::make_unique<device_memory_resource>(0, device_pool_options{.max_size = max_size});
  }
  static std::size_t exhausting_request() { return max_size + mebibyte; }
};

struct device_malloc_case {
  static constexpr const char* name = "device_malloc";
  static constexpr bool needs_gpu = true;
  static std::unique_ptr<stream_ordered_resource> make() { return std::make_unique<device_malloc_resource>(0); }
  static std::size_t exhausting_request() { return impossible_request; }
};

struct virtual_memory_case {
  static constexpr const char* name = "virtual_memory";
  static constexpr bool needs_gpu = true;
  static std::unique_ptr<stream_ordered_resource> make() { return std::make_unique<virtual_memory_resource>(0); }
  static std::size_t exhausting_request() { return impossible_request; }
};

struct pinned_default_case {
  static constexpr const char* name = "pinned_default_pool";
  static constexpr bool needs_gpu = true;
  static std::unique_ptr<stream_ordered_resource> make() { return std::make_unique<pinned_memory_resource>(); }
  static std::size_t exhausting_request() { return impossible_request; }
};

struct pinned_owned_case {
  static constexpr const char* name = "pinned_owned_pool";
  static constexpr bool needs_gpu = true;
  static constexpr std::size_t max_size = 256 * mebibyte;
  static std::unique_ptr<stream_ordered_resource> make() {
    return std::make_unique<pinned_memory_resource>(pinned_pool_options{.max_size = max_size});
  }
  static std::size_t exhausting_request() { return max_size + mebibyte; }
};

struct managed_default_case {
  static constexpr const char* name = "managed_default_pool";
  static constexpr bool needs_gpu = true;
  static std::unique_ptr<stream_ordered_resource> make() { return std::make_unique<managed_memory_resource>(); }
};

struct managed_owned_case {
  static constexpr const char* name = "managed_owned_pool";
  static constexpr bool needs_gpu = true;
  static std::unique_ptr<stream_ordered_resource> make() {
    return std::make_unique<managed_memory_resource>(managed_pool_options{.preferred_device = 0});
  }
};

// ---- adaptors: each runs the whole contract over an upstream case ----------

/// How each adaptor is made for the contract; `log` is a scratch sink for the logging adaptor.
struct statistics_maker {
  static statistics_adaptor make(stream_ordered_resource& upstream, std::ostream& /*log*/) {
    return statistics_adaptor(upstream);
  }
};
struct tracking_maker {
  // The contract frees correctly: any misuse report is a failure.
  static tracking_adaptor make(stream_ordered_resource& upstream, std::ostream& /*log*/) {
    return tracking_adaptor(upstream, {.capture_call_stacks = true,
                                       .on_misuse = [](const misuse_report& misuse) { ADD_FAILURE() << misuse.message; }});
  }
};
struct limiting_maker {
  static constexpr std::size_t cap = 128 * mebibyte;  // above what the contract holds at once
  static limiting_adaptor make(stream_ordered_resource& upstream, std::ostream& /*log*/) {
    return limiting_adaptor(upstream, cap);
  }
};
struct logging_maker {
  static logging_adaptor make(stream_ordered_resource& upstream, std::ostream& log) {
    return logging_adaptor(upstream, log);
  }
};
struct failure_callback_maker {
  // One retry, then the refusal goes through.
  static failure_callback_adaptor make(stream_ordered_resource& upstream, std::ostream& /*log*/) {
    return failure_callback_adaptor(upstream, [](const allocation_failure& failure) { return failure.attempt < 2; });
  }
};

struct history_maker {
  static history_adaptor make(stream_ordered_resource& upstream, std::ostream& /*log*/) {
    return history_adaptor(upstream, {.capacity = 1024, .capture_call_stacks = true});
  }
};

struct caching_maker {
  static caching_resource make(stream_ordered_resource& upstream, std::ostream& /*log*/) {
    return caching_resource(upstream);
  }
};

/// Owns an upstream resource and the adaptor over it.
template <class Upstream, class Maker>
struct adaptor_holder {
  std::unique_ptr<stream_ordered_resource> upstream = Upstream::make();
  std::ostringstream log;
  decltype(Maker::make(std::declval<stream_ordered_resource&>(), std::declval<std::ostream&>())) adaptor =
      Maker::make(*upstream, log);
};

/// An adaptor over `Upstream`'s resource. The fixture's pointer is the adaptor
/// itself, sharing ownership of the holder that keeps its upstream alive.
template <class Upstream, class Maker>
struct adaptor_case {
  static constexpr bool needs_gpu = Upstream::needs_gpu;
  static std::shared_ptr<stream_ordered_resource> make() {
    auto holder = std::make_shared<adaptor_holder<Upstream, Maker>>();
    return {holder, &holder->adaptor};
  }
  static std::size_t exhausting_request() { return Upstream::exhausting_request(); }
};

/// The resource at the bottom of a stack of adaptors: the one whose refusal
/// adaptors pass on, and whose description ends each adaptor's description.
inline const stream_ordered_resource& innermost_resource(const stream_ordered_resource& resource) {
  const stream_ordered_resource* below = resource.upstream();
  return below != nullptr ? innermost_resource(*below) : resource;
}

template <class Upstream>
using each_adaptor_over = ::testing::Types<
    adaptor_case<Upstream, statistics_maker>, adaptor_case<Upstream, tracking_maker>,
    adaptor_case<Upstream, limiting_maker>, adaptor_case<Upstream, logging_maker>,
    adaptor_case<Upstream, failure_callback_maker>, adaptor_case<Upstream, caching_maker>>;

/// An adaptor made by `Maker` over the host resource and each kind's owned pool.
template <class Maker>
using adaptor_over_each_kind =
    ::testing::Types<adaptor_case<host_case, Maker>, adaptor_case<device_owned_case, Maker>,
                     adaptor_case<pinned_owned_case, Maker>, adaptor_case<managed_owned_case, Maker>>;
/// As above, without managed memory, which is never exhausted.
template <class Maker>
using adaptor_over_exhaustible_kinds = ::testing::Types<adaptor_case<host_case, Maker>, adaptor_case<device_owned_case, Maker>,
                                                        adaptor_case<pinned_owned_case, Maker>>;

/// Joins ::testing::Types lists.
template <class... Lists>
struct join_types;
template <class... Types>
struct join_types<::testing::Types<Types...>> {
  using type = ::testing::Types<Types...>;
};
template <class... First, class... Second, class... Rest>
struct join_types<::testing::Types<First...>, ::testing::Types<Second...>, Rest...>
    : join_types<::testing::Types<First..., Second...>, Rest...> {};

using all_resource_cases = with_nccl_case<join_types<
    ::testing::Types<host_case, device_default_case, device_owned_case, pinned_default_case, pinned_owned_case,
                     managed_default_case, managed_owned_case>,
    each_adaptor_over<host_case>, each_adaptor_over<device_owned_case>, each_adaptor_over<pinned_owned_case>,
    each_adaptor_over<managed_owned_case>>::type>;

/// The cases the contract may exhaust. Managed memory is left out on purpose:
/// oversubscribing it can stall the whole GPU.
using exhaustible_resource_cases = with_nccl_case<
    join_types<::testing::Types<host_case, device_default_case, device_owned_case, pinned_default_case,
                                pinned_owned_case>,
               each_adaptor_over<host_case>, each_adaptor_over<device_owned_case>,
               each_adaptor_over<pinned_owned_case>>::type>;

/// A fixture that makes the case's resource and a stream to use it on; it
/// skips, visibly, where the case needs a GPU and none exists.
template <class Case>
class resource_fixture : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Case::needs_gpu && !gpu_available()) GTEST_SKIP() << "no CUDA device was found: this test needs a GPU";
    resource_ = Case::make();
    if (Case::needs_gpu) stream_.emplace(0);
  }

  stream_ordered_resource& resource() { return *resource_; }
  /// A stream of the test's own; the null stream for the host resource, which ignores it.
  stream_ref test_stream() const { return stream_ ? stream_->ref() : stream_ref{}; }
  void synchronize() const {
    if (stream_) stream_->synchronize();
  }

  /// Writes a pattern into `bytes` at `p` and reads it back: on the host
  /// where the memory is host-accessible, with kernels otherwise.
  void expect_usable(void* p, std::size_t bytes, stream_ref stream) {
    ASSERT_NE(p, nullptr);
    if (resource_->is_host_accessible()) {
      synchronize();  // earlier work on the stream may still use reused memory
      auto* bytes_at = static_cast<unsigned char*>(p);
      std::memset(bytes_at, 0x5a, bytes);
      EXPECT_EQ(bytes_at[0], 0x5a);
      EXPECT_EQ(bytes_at[bytes - 1], 0x5a);
    }
    if (resource_->is_device_accessible() && bytes >= sizeof(std::uint32_t)) {
      auto* words = static_cast<std::uint32_t*>(p);
      const std::size_t count = bytes / sizeof(std::uint32_t);
      write_sequence(words, count, 17, stream);
      EXPECT_EQ(count_sequence_mismatches(words, count, 17, stream), 0u);
    }
  }

  std::shared_ptr<stream_ordered_resource> resource_;  // shared: an adaptor case shares its holder
  std::optional<cudapmr::stream> stream_;
};

}  // namespace cudapmr::test
