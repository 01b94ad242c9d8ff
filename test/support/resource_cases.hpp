#pragma once
// The resources the shared contract runs over, one "case" type each; typed
// suites show the case type in every test name.

#include "support/gpu.hpp"

#include <cudapmr/cudapmr.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
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

using all_resource_cases = ::testing::Types<host_case, device_default_case, device_owned_case, pinned_default_case,
                                            pinned_owned_case, managed_default_case, managed_owned_case>;

/// The cases the contract may exhaust. Managed memory is left out on purpose:
/// oversubscribing it can stall the whole GPU.
using exhaustible_resource_cases =
    ::testing::Types<host_case, device_default_case, device_owned_case, pinned_default_case, pinned_owned_case>;

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

  std::unique_ptr<stream_ordered_resource> resource_;
  std::optional<cudapmr::stream> stream_;
};

}  // namespace cudapmr::test
