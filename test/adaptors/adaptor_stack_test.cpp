// SPDX-License-Identifier: Apache-2.0
// The adaptors stack in any order and serve std::pmr containers like any resource.
#include "support/resource_cases.hpp"

#include "adaptor_stack.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include <memory_resource>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace cudapmr::test {
namespace {

/// Every adaptor over `upstream` in the order the test names (bottom first),
/// counting the callbacks' calls.
struct counted_stack {
  counted_stack(stream_ordered_resource& upstream, const std::string& order)
      : stack(upstream, apps::adaptor_stack_options{
                            .order = order,
                            .cap = cap,
                            .log = &log,
                            .on_failure = [this](const allocation_failure&) {
                              ++failures;
                              return false;
                            },
                            .tracking = tracking_options{.on_misuse = [this](const misuse_report&) { ++misuses; }}}) {}

  static constexpr std::size_t cap = 1 << 20;
  std::ostringstream log;
  int misuses = 0;
  int failures = 0;
  apps::adaptor_stack stack;
};

class AdaptorStack : public ::testing::TestWithParam<std::string> {};

TEST_P(AdaptorStack, EveryLayerSeesTheSameEvents) {
  host_memory_resource upstream;
  {
    counted_stack counted(upstream, GetParam());
    apps::adaptor_stack& stack = counted.stack;
    {
      std::pmr::vector<int> values(1000, &stack.top());
      std::iota(values.begin(), values.end(), 0);
      EXPECT_EQ(std::accumulate(values.begin(), values.end(), 0), 999 * 1000 / 2);
      EXPECT_EQ(stack.statistics().statistics().bytes.current, static_cast<std::int64_t>(1000 * sizeof(int)));
      EXPECT_EQ(stack.tracking().outstanding_count(), 1u);
      EXPECT_EQ(stack.limiting().used_bytes(), 1000 * sizeof(int));
    }
    EXPECT_THROW(static_cast<void>(stack.top().allocate(counted_stack::cap + 1)), std::bad_alloc);
    EXPECT_EQ(counted.failures, 1) << "the limit's refusal reaches the callback wherever it sits";
    if (GetParam().find('h') != std::string::npos) {
      const std::vector<history_event> events = stack.history().events();
      EXPECT_EQ(std::count_if(events.begin(), events.end(),
                              [](const history_event& event) { return event.action == history_action::allocate; }),
                1)
          << "the vector's one allocation";
      if (GetParam().find('h') > GetParam().find('l')) {
        ASSERT_FALSE(events.empty());
        EXPECT_EQ(events.back().action, history_action::out_of_memory) << "the history above the limit saw it refuse";
      }
    }

    void* p = stack.top().allocate_async(64, stream_ref{});
    stack.top().deallocate_async(p, 64, stream_ref{});
    stack.top().deallocate_async(p, 64, stream_ref{});  // a double free, caught by the tracker
    EXPECT_EQ(counted.misuses, 1);
    EXPECT_EQ(stack.statistics().statistics().bytes.current, 0);
    EXPECT_EQ(stack.limiting().used_bytes(), 0u);
    EXPECT_NE(stack.top().description().find("host_memory_resource"), std::string::npos);
  }
  EXPECT_EQ(upstream.used_bytes(), 0u);
}

// s statistics, t tracking, l limiting, g logging, f failure callback, h history; bottom
// first. The tracker sits above the statistics and the limit, so that the
// double free it stops never reaches them; the callback sits above the limit,
// whose refusal it is shown.
INSTANTIATE_TEST_SUITE_P(Orders, AdaptorStack, ::testing::Values("sltgf", "lsgtf", "gslft", "slftg", "hsltgf", "slhtgf"));

}  // namespace
}  // namespace cudapmr::test
