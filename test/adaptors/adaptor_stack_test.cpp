// SPDX-License-Identifier: Apache-2.0
// The adaptors stack in any order and serve std::pmr containers like any resource.
#include "support/resource_cases.hpp"

#include <gtest/gtest.h>

#include <memory_resource>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace cudapmr::test {
namespace {

/// Every adaptor, over `upstream`, in the order given by `order` (bottom first).
class adaptor_stack {
 public:
  adaptor_stack(stream_ordered_resource& upstream, const std::string& order) : top_(&upstream) {
    for (const char layer : order) {
      switch (layer) {
        case 's': top_ = &statistics_.emplace(*top_); break;
        case 't': top_ = &tracking_.emplace(*top_, tracking_options{.on_misuse = [this](const misuse_report&) { ++misuses_; }}); break;
        case 'l': top_ = &limiting_.emplace(*top_, cap); break;
        case 'g': top_ = &logging_.emplace(*top_, log_); break;
        case 'f':
          top_ = &failure_.emplace(*top_, [this](const allocation_failure&) {
            ++failures_;
            return false;
          });
          break;
        default: ADD_FAILURE() << "unknown layer " << layer;
      }
    }
  }

  static constexpr std::size_t cap = 1 << 20;
  stream_ordered_resource& top() { return *top_; }

  std::ostringstream log_;
  std::optional<statistics_adaptor> statistics_;
  std::optional<tracking_adaptor> tracking_;
  std::optional<limiting_adaptor> limiting_;
  std::optional<logging_adaptor> logging_;
  std::optional<failure_callback_adaptor> failure_;
  int misuses_ = 0;
  int failures_ = 0;

 private:
  stream_ordered_resource* top_;
};

class AdaptorStack : public ::testing::TestWithParam<std::string> {};

TEST_P(AdaptorStack, EveryLayerSeesTheSameEvents) {
  host_memory_resource upstream;
  {
    adaptor_stack stack(upstream, GetParam());
    {
      std::pmr::vector<int> values(1000, &stack.top());
      std::iota(values.begin(), values.end(), 0);
      EXPECT_EQ(std::accumulate(values.begin(), values.end(), 0), 999 * 1000 / 2);
      EXPECT_EQ(stack.statistics_->statistics().bytes.current, static_cast<std::int64_t>(1000 * sizeof(int)));
      EXPECT_EQ(stack.tracking_->outstanding_count(), 1u);
      EXPECT_EQ(stack.limiting_->used_bytes(), 1000 * sizeof(int));
    }
    EXPECT_THROW(static_cast<void>(stack.top().allocate(adaptor_stack::cap + 1)), std::bad_alloc);
    EXPECT_EQ(stack.failures_, 1) << "the limit's refusal reaches the callback wherever it sits";

    void* p = stack.top().allocate_async(64, stream_ref{});
    stack.top().deallocate_async(p, 64, stream_ref{});
    stack.top().deallocate_async(p, 64, stream_ref{});  // a double free, caught by the tracker
    EXPECT_EQ(stack.misuses_, 1);
    EXPECT_EQ(stack.statistics_->statistics().bytes.current, 0);
    EXPECT_EQ(stack.limiting_->used_bytes(), 0u);
    EXPECT_NE(stack.top().description().find("host_memory_resource"), std::string::npos);
  }
  EXPECT_EQ(upstream.used_bytes(), 0u);
}

// s statistics, t tracking, l limiting, g logging, f failure callback; bottom
// first. The tracker sits above the statistics and the limit, so that the
// double free it stops never reaches them; the callback sits above the limit,
// whose refusal it is shown.
INSTANTIATE_TEST_SUITE_P(Orders, AdaptorStack, ::testing::Values("sltgf", "lsgtf", "gslft", "slftg"));

}  // namespace
}  // namespace cudapmr::test
