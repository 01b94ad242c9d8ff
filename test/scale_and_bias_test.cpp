// SPDX-License-Identifier: Apache-2.0
// The apps' scale_and_bias kernels (apps/common): every variant, bit-exact
// against a fused multiply-add on the host, at every alignment and odd counts.
#include "support/resource_cases.hpp"

#include <scale_and_bias.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace cudapmr::test {
namespace {

using kernel = std::function<void(float*, std::size_t, float, float, stream_ref)>;

struct variant {
  std::string name;
  kernel launch;
};

std::vector<variant> variants() {
  std::vector<variant> all{{"scale_and_bias", demo::scale_and_bias}, {"scalar", demo::scale_and_bias_scalar}};
  for (const unsigned loads : {1u, 2u, 4u, 8u}) {
    all.push_back({"float4 x" + std::to_string(loads),
                   [loads](float* data, std::size_t count, float scale, float bias, stream_ref stream) {
                     demo::scale_and_bias_vectorized(data, count, scale, bias, loads, stream);
                   }});
  }
  return all;
}

class ScaleAndBias : public ::testing::Test {
 protected:
  void SetUp() override { CUDAPMR_REQUIRE_GPU(); }
};

TEST_F(ScaleAndBias, EveryVariantIsBitExactAtEveryAlignmentAndTouchesNothingElse) {
  const cudapmr::stream stream(0);
  device_memory_resource device_memory(0);
  std::mt19937 random(1234);
  std::uniform_real_distribution<float> value(-1000.0f, 1000.0f);
  constexpr float poison = -12345.678f;
  constexpr std::size_t padding = 8;
  for (const variant& each : variants()) {
    for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{4}, std::size_t{5},
                                    std::size_t{7}, std::size_t{257}, std::size_t{4099}, std::size_t{1000003}}) {
      for (std::size_t offset = 0; offset < 4; ++offset) {
        const float scale = value(random) / 100.0f;
        const float bias = value(random);
        std::vector<float> host(count + padding, poison);
        for (std::size_t i = offset; i < offset + count; ++i) host[i] = value(random);
        buffer<float> on_device(device_memory, host.size(), stream);
        on_device.copy_from(std::span<const float>(host), stream);
        each.launch(on_device.data() + offset, count, scale, bias, stream);
        std::vector<float> result(host.size());
        on_device.copy_to(std::span<float>(result), stream);
        stream.synchronize();
        std::size_t wrong = 0;
        std::size_t first_wrong = 0;
        for (std::size_t i = 0; i < host.size(); ++i) {
          const bool inside = i >= offset && i < offset + count;
          const float expected = inside ? std::fma(host[i], scale, bias) : poison;
          if (std::memcmp(&expected, &result[i], sizeof(float)) != 0 && wrong++ == 0) first_wrong = i;
        }
        EXPECT_EQ(wrong, 0u) << each.name << ", " << count << " floats at offset " << offset << ": first at index "
                             << first_wrong;
      }
    }
  }
}

TEST(ScaleAndBiasArguments, LoadsInFlightOutsideTheChoicesThrow) {
  EXPECT_THROW(demo::scale_and_bias_vectorized(nullptr, 16, 1.0f, 0.0f, 3, stream_ref{}), std::invalid_argument);
}

}  // namespace
}  // namespace cudapmr::test
