// SPDX-License-Identifier: Apache-2.0
// tracking_adaptor: outstanding allocations, leak reports, and every bad free
// it must catch, both from the checking call (an exception) and from the
// noexcept path (a report), never passing the bad free upstream.
#include "support/resource_contract.hpp"
#include "support/call_site.hpp"
#include "adaptors/gpu_upstreams.hpp"
#include "support/resource_cases.hpp"

#include <cudapmr/adaptors/failure_callback_adaptor.hpp>
#include <cudapmr/adaptors/tracking_adaptor.hpp>
#include <cudapmr/detail/thread_ordinal.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace cudapmr::test {
namespace {

cudaStream_t fake_stream(std::uintptr_t id) { return reinterpret_cast<cudaStream_t>(id * 0x1000); }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// A tracker over a host resource whose noexcept-path reports are collected.
class TrackingAdaptor : public ::testing::Test {
 protected:
  tracking_adaptor make_tracker(bool capture_call_stacks = false, std::size_t freed_history = 4096) {
    return tracking_adaptor(upstream_, {.capture_call_stacks = capture_call_stacks,
                                        .freed_history = freed_history,
                                        .on_misuse = [this](const misuse_report& report) {
                                          const std::lock_guard lock(mutex_);
                                          reports_.push_back(report);
                                        }});
  }

  /// Runs `free` on the checking path and expects a misuse_error of `kind`
  /// whose message names each of `parts`; the upstream must not have freed.
  template <class Free>
  void expect_misuse(Free free, misuse_kind kind, const std::vector<std::string>& parts) {
    const std::size_t upstream_bytes = upstream_.used_bytes();
    try {
      free();
      ADD_FAILURE() << "a " << to_string(kind) << " was accepted";
    } catch (const misuse_error& error) {
      EXPECT_EQ(error.report().kind, kind) << error.what();
      EXPECT_TRUE(contains(error.what(), std::string(to_string(kind)))) << error.what();
      for (const std::string& part : parts) EXPECT_TRUE(contains(error.what(), part)) << error.what();
    }
    EXPECT_EQ(upstream_.used_bytes(), upstream_bytes) << "the bad free reached the upstream";
  }

  host_memory_resource upstream_;
  std::mutex mutex_;
  std::vector<misuse_report> reports_;
};

TEST_F(TrackingAdaptor, ListsOutstandingAllocationsOldestFirst) {
  tracking_adaptor tracker = make_tracker();
  void* first = tracker.allocate_async(100, 64, fake_stream(1));
  void* second = tracker.allocate(2000);
  const std::vector<allocation_record> records = tracker.outstanding();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].pointer, first);
  EXPECT_EQ(records[0].bytes, 100u);
  EXPECT_EQ(records[0].alignment, 64u);
  EXPECT_EQ(records[0].stream, stream_ref(fake_stream(1)));
  EXPECT_EQ(records[0].thread, detail::thread_ordinal());
  EXPECT_LT(records[0].sequence, records[1].sequence);
  EXPECT_EQ(records[1].pointer, second);
  EXPECT_EQ(records[1].alignment, alignof(std::max_align_t)) << "pmr's default alignment";
  EXPECT_EQ(records[1].stream, tracker.bound_stream()) << "the pmr path is ordered on the bound stream";
  EXPECT_TRUE(records[0].call_stack.empty()) << "call stacks only when asked for";
  EXPECT_EQ(tracker.outstanding_count(), 2u);
  EXPECT_EQ(tracker.outstanding_bytes(), 2100u);

  tracker.deallocate_async(first, 100, 64, fake_stream(1));
  tracker.deallocate(second, 2000);
  EXPECT_TRUE(tracker.outstanding().empty());
  EXPECT_EQ(tracker.outstanding_bytes(), 0u);
  EXPECT_TRUE(reports_.empty());
}

TEST_F(TrackingAdaptor, RecordsTheAllocatingThread) {
  tracking_adaptor tracker = make_tracker();
  void* p = nullptr;
  std::uint64_t other_thread = 0;
  std::thread([&] {
    p = tracker.allocate_async(64, stream_ref{});
    other_thread = detail::thread_ordinal();
  }).join();
  ASSERT_EQ(tracker.outstanding().size(), 1u);
  EXPECT_EQ(tracker.outstanding()[0].thread, other_thread);
  EXPECT_NE(other_thread, detail::thread_ordinal());
  tracker.deallocate_async(p, 64, stream_ref{});
}

TEST_F(TrackingAdaptor, LeakReportNamesEachOutstandingAllocationWithItsCallStack) {
  tracking_adaptor tracker = make_tracker(true);
  EXPECT_TRUE(contains(tracker.leak_report(), "no allocations outstanding")) << tracker.leak_report();
  void* leaked = tracker.allocate_async(1536, fake_stream(3));
  const std::vector<allocation_record> records = tracker.outstanding();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_FALSE(records[0].call_stack.empty()) << "glibc backtrace gave no frames";
  const std::string report = tracker.leak_report();
  EXPECT_TRUE(contains(report, "1 allocation outstanding, 1.5 KiB in all")) << report;
  EXPECT_TRUE(contains(report, "1536 bytes")) << report;
  EXPECT_TRUE(contains(report, "alignment 256")) << report;
  EXPECT_TRUE(contains(report, fmt::format("{}", fmt::ptr(leaked)))) << report;
  EXPECT_TRUE(contains(report, "\n      at ")) << "no call stack in the report:\n" << report;
  EXPECT_TRUE(contains(report, tracker.description())) << report;
  tracker.deallocate_async(leaked, 1536, fake_stream(3));
}

TEST_F(TrackingAdaptor, ACallStackStartsInTheFunctionThatAllocatedThroughEveryAdaptorAbove) {
  // The first frame was the caller's caller where allocate_async tail-called
  // the adaptor (an optimized build): the count of frames skipped was fixed.
  tracking_adaptor tracker = make_tracker(true);
  tracking_adaptor above(tracker, {.capture_call_stacks = true});  // its call upstream keeps the user's call site
  void* direct = allocate_from_a_call_site(tracker, 64);
  void* through_pmr = allocate_through_pmr_from_a_call_site(tracker, 128);
  void* through_both = allocate_from_a_call_site(above, 256);
  for (const allocation_record& record : tracker.outstanding()) {
    ASSERT_FALSE(record.call_stack.empty());
    const bool pmr = record.pointer == through_pmr;
    EXPECT_TRUE(pmr ? returns_into_pmr_call_site(record.call_stack[0])
                    : returns_into_direct_call_site(record.call_stack[0]))
        << record.bytes << " bytes: " << record.call_stack[0];
  }
  ASSERT_EQ(above.outstanding().size(), 1u);
  EXPECT_TRUE(returns_into_direct_call_site(above.outstanding()[0].call_stack[0]));
  above.deallocate_async(through_both, 256, stream_ref{});
  tracker.deallocate(through_pmr, 128, 256);
  tracker.deallocate_async(direct, 64, stream_ref{});
}

TEST_F(TrackingAdaptor, WhatAFailureCallbackAllocatesStartsInTheCallbacksOwnCallSite) {
  // The outer allocation's call site was kept for every allocation inside it.
  tracking_adaptor tracker = make_tracker(true);
  host_memory_resource small(64);
  failure_callback_adaptor asking(small, [&](const allocation_failure&) {
    void* p = allocate_from_a_call_site(tracker, 32);
    EXPECT_TRUE(returns_into_direct_call_site(tracker.outstanding().at(0).call_stack.at(0)));
    tracker.deallocate_async(p, 32, stream_ref{});
    return false;
  });
  EXPECT_THROW(static_cast<void>(asking.allocate_async(128, stream_ref{})), out_of_memory);
  EXPECT_EQ(tracker.outstanding_count(), 0u);
}

TEST_F(TrackingAdaptor, CheckedFreeOfAPointerItNeverGaveThrows) {
  tracking_adaptor tracker = make_tracker();
  alignas(256) static unsigned char foreign[256];
  expect_misuse([&] { tracker.deallocate_checked(foreign, 256, stream_ref{}); }, misuse_kind::unknown_pointer,
                {fmt::format("{}", fmt::ptr(static_cast<void*>(foreign))), "256 bytes", "never handed it out"});
  // Memory of the upstream's, but not through this tracker, is just as unknown.
  void* direct = upstream_.allocate_async(64, stream_ref{});
  expect_misuse([&] { tracker.deallocate_checked(direct, 64, stream_ref{}); }, misuse_kind::unknown_pointer, {});
  upstream_.deallocate_async(direct, 64, stream_ref{});
}

TEST_F(TrackingAdaptor, CheckedDoubleFreeThrows) {
  tracking_adaptor tracker = make_tracker();
  void* p = tracker.allocate_async(4096, stream_ref{});
  tracker.deallocate_checked(p, 4096, stream_ref{});
  expect_misuse([&] { tracker.deallocate_checked(p, 4096, stream_ref{}); }, misuse_kind::double_free,
                {"4096 bytes", "was freed already", "allocation #1"});
}

TEST_F(TrackingAdaptor, CheckedFreeWithTheWrongSizeThrowsAndKeepsTheAllocation) {
  tracking_adaptor tracker = make_tracker();
  void* p = tracker.allocate_async(1000, stream_ref{});
  expect_misuse([&] { tracker.deallocate_checked(p, 999, stream_ref{}); }, misuse_kind::wrong_size,
                {"999 bytes given", "allocation #1 of 1000 bytes"});
  EXPECT_EQ(tracker.outstanding_count(), 1u) << "a bad free frees nothing";
  tracker.deallocate_checked(p, 1000, stream_ref{});  // the right free still works
  EXPECT_EQ(tracker.outstanding_count(), 0u);
  EXPECT_EQ(upstream_.used_bytes(), 0u);
}

TEST_F(TrackingAdaptor, CheckedFreeWithTheWrongAlignmentThrows) {
  tracking_adaptor tracker = make_tracker();
  void* p = tracker.allocate_async(1000, 512, stream_ref{});
  expect_misuse([&] { tracker.deallocate_checked(p, 1000, 256, stream_ref{}); }, misuse_kind::wrong_alignment,
                {"alignment 256 given", "(alignment 512)"});
  tracker.deallocate_checked(p, 1000, 512, stream_ref{});
  EXPECT_EQ(upstream_.used_bytes(), 0u);
}

TEST_F(TrackingAdaptor, NoexceptFreesReportEachMisuseAndNeverReachTheUpstream) {
  tracking_adaptor tracker = make_tracker();
  alignas(256) static unsigned char foreign[256];
  void* freed = tracker.allocate_async(128, stream_ref{});
  // Allocated before `freed` goes, so that the host heap cannot hand it the same address.
  void* live = tracker.allocate_async(300, 1024, fake_stream(2));
  tracker.deallocate_async(freed, 128, stream_ref{});
  const std::size_t upstream_bytes = upstream_.used_bytes();

  tracker.deallocate_async(foreign, 256, stream_ref{});   // unknown pointer
  tracker.deallocate_async(freed, 128, stream_ref{});     // double free
  tracker.deallocate_async(live, 200, 1024, fake_stream(2));  // wrong size
  tracker.deallocate(live, 300, 256);                     // wrong alignment, pmr path
  EXPECT_EQ(upstream_.used_bytes(), upstream_bytes);
  ASSERT_EQ(reports_.size(), 4u);
  EXPECT_EQ(reports_[0].kind, misuse_kind::unknown_pointer);
  EXPECT_FALSE(reports_[0].allocation.has_value());
  EXPECT_EQ(reports_[1].kind, misuse_kind::double_free);
  EXPECT_EQ(reports_[1].allocation->bytes, 128u);
  EXPECT_EQ(reports_[2].kind, misuse_kind::wrong_size);
  EXPECT_EQ(reports_[2].stream, stream_ref(fake_stream(2)));
  EXPECT_EQ(reports_[2].allocation->bytes, 300u);
  EXPECT_EQ(reports_[3].kind, misuse_kind::wrong_alignment);
  EXPECT_EQ(reports_[3].allocation->alignment, 1024u);
  for (const misuse_report& report : reports_) EXPECT_TRUE(contains(report.message, tracker.description()));

  tracker.deallocate_async(live, 300, 1024, fake_stream(2));
  EXPECT_EQ(reports_.size(), 4u);
  EXPECT_EQ(upstream_.used_bytes(), 0u);
}

TEST_F(TrackingAdaptor, ANewAllocationAtAFreedAddressIsNotADoubleFree) {
  tracking_adaptor tracker = make_tracker();
  void* first = tracker.allocate_async(64, stream_ref{});
  tracker.deallocate_async(first, 64, stream_ref{});
  // The host upstream may give the same address again; either way, freeing the new one is right.
  void* second = tracker.allocate_async(64, stream_ref{});
  EXPECT_NO_THROW(tracker.deallocate_checked(second, 64, stream_ref{}));
  EXPECT_TRUE(reports_.empty());
}

TEST_F(TrackingAdaptor, ForgottenFreesLookUnknown) {
  tracking_adaptor tracker = make_tracker(false, 2);
  void* oldest = tracker.allocate_async(64, stream_ref{});
  std::vector<void*> later;
  for (int i = 0; i < 3; ++i) later.push_back(tracker.allocate_async(64, stream_ref{}));
  tracker.deallocate_async(oldest, 64, stream_ref{});
  for (void* p : later) tracker.deallocate_async(p, 64, stream_ref{});
  expect_misuse([&] { tracker.deallocate_checked(oldest, 64, stream_ref{}); }, misuse_kind::unknown_pointer, {});
  expect_misuse([&] { tracker.deallocate_checked(later.back(), 64, stream_ref{}); }, misuse_kind::double_free, {});
}

TEST_F(TrackingAdaptor, ThreadsTrackTheirOwnAllocations) {
  tracking_adaptor tracker = make_tracker();
  std::vector<std::thread> workers;
  for (int index = 0; index < 8; ++index) {
    workers.emplace_back([&tracker, index] {
      const stream_ref stream = fake_stream(static_cast<std::uintptr_t>(index + 1));
      std::vector<void*> mine;
      for (int i = 0; i < 500; ++i) {
        mine.push_back(tracker.allocate_async(static_cast<std::size_t>(64 + index), stream));
        if (mine.size() > 3) {
          tracker.deallocate_checked(mine.front(), static_cast<std::size_t>(64 + index), stream);
          mine.erase(mine.begin());
        }
      }
      for (void* p : mine) tracker.deallocate_async(p, static_cast<std::size_t>(64 + index), stream);
    });
  }
  for (std::thread& worker : workers) worker.join();
  EXPECT_EQ(tracker.outstanding_count(), 0u);
  EXPECT_TRUE(reports_.empty());
  EXPECT_EQ(upstream_.used_bytes(), 0u);
}

TEST_F(TrackingAdaptor, CatchesMisuseOverTheGpuKinds) {
  CUDAPMR_REQUIRE_GPU();
  const cudapmr::stream stream(0);
  gpu_upstreams upstreams;
  for (stream_ordered_resource* upstream : upstreams.all()) {
    tracking_adaptor tracker(*upstream, {.on_misuse = [this](const misuse_report& report) { reports_.push_back(report); }});
    void* p = tracker.allocate_async(mebibyte, stream);
    EXPECT_THROW(tracker.deallocate_checked(p, mebibyte / 2, stream), misuse_error) << upstream->description();
    tracker.deallocate_async(p, mebibyte, 512, stream);
    EXPECT_EQ(tracker.outstanding_count(), 1u);
    tracker.deallocate_async(p, mebibyte, stream);
    tracker.deallocate_async(p, mebibyte, stream);
    EXPECT_EQ(tracker.outstanding_count(), 0u);
    stream.synchronize();
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "a bad free reached CUDA";
  }
  ASSERT_EQ(reports_.size(), 6u);
  EXPECT_EQ(reports_[1].kind, misuse_kind::double_free);
}

// The shared contract, over the host resource and each kind's owned pool.
using tracking_adaptor_cases = adaptor_over_each_kind<tracking_maker>;
using tracking_adaptor_exhaustible_cases = adaptor_over_exhaustible_kinds<tracking_maker>;
CUDAPMR_INSTANTIATE_RESOURCE_CONTRACT(TrackingAdaptor, tracking_adaptor_cases, tracking_adaptor_exhaustible_cases);

}  // namespace
}  // namespace cudapmr::test
