// SPDX-License-Identifier: Apache-2.0
// Filling the GPU (through a device pool) and a capped pinned pool until
// allocation fails: every further request throws out_of_memory naming what
// was asked, no CUDA error is left behind, memory freed is allocated again,
// and the data in the blocks that stayed is intact. Device memory only:
// managed memory is never oversubscribed (it can stall the GPU). Through a
// history_adaptor, the refusal explains itself: its report is printed and
// its fields checked.
#include "support/resource_cases.hpp"

#include <gtest/gtest.h>

#include <cudapmr/memory_snapshot.hpp>

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

namespace cudapmr::test {
namespace {

constexpr std::size_t gibibyte = std::size_t{1} << 30;

struct stamped_block {
  std::uint32_t* words;
  std::size_t bytes;
  std::uint32_t seed;
};

/// Fills a resource with stamped blocks, then checks and frees them.
class filler {
 public:
  filler(stream_ordered_resource& resource, stream_ref stream) : resource_(resource), stream_(stream) {
    // Allocated up front: once the memory is gone, the check cannot allocate its counter.
    counter_ = static_cast<unsigned long long*>(resource_.allocate_async(sizeof(unsigned long long), stream_));
  }
  ~filler() {
    for (const stamped_block& block : blocks_) resource_.deallocate_async(block.words, block.bytes, stream_);
    resource_.deallocate_async(counter_, sizeof(unsigned long long), stream_);
    static_cast<void>(cudaStreamSynchronize(stream_.get()));
  }
  filler(const filler&) = delete;
  filler& operator=(const filler&) = delete;

  /// Allocates blocks of each size in turn, largest first, until the resource
  /// refuses that size; returns how many blocks were allocated.
  std::size_t fill(const std::vector<std::size_t>& sizes) {
    std::size_t added = 0;
    for (const std::size_t bytes : sizes) {
      while (try_add(bytes)) ++added;
    }
    return added;
  }

  /// Allocates and stamps one block; false when the resource is out of memory.
  bool try_add(std::size_t bytes) {
    void* p = nullptr;
    try {
      p = resource_.allocate_async(bytes, stream_);
    } catch (const out_of_memory&) {
      EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "out_of_memory left a CUDA error behind";
      return false;
    }
    const auto seed = static_cast<std::uint32_t>(0x9e3779b9u * (next_seed_++));
    blocks_.push_back({static_cast<std::uint32_t*>(p), bytes, seed});
    write_sequence(blocks_.back().words, bytes / sizeof(std::uint32_t), seed, stream_);
    // The first check loads the checking kernel while memory is left to load it.
    if (blocks_.size() == 1) {
      EXPECT_EQ(mismatches(blocks_.back()), 0u);
    }
    return true;
  }

  /// Frees every other block (the second, fourth...), in stream order; returns their sizes.
  std::vector<std::size_t> free_every_other() {
    std::vector<std::size_t> freed;
    std::vector<stamped_block> kept;
    for (std::size_t i = 0; i < blocks_.size(); ++i) {
      if (i % 2 == 1) {
        resource_.deallocate_async(blocks_[i].words, blocks_[i].bytes, stream_);
        freed.push_back(blocks_[i].bytes);
      } else {
        kept.push_back(blocks_[i]);
      }
    }
    blocks_ = std::move(kept);
    return freed;
  }

  /// The words of `block` that lost their stamp.
  std::size_t mismatches(const stamped_block& block) {
    return count_sequence_mismatches(block.words, block.bytes / sizeof(std::uint32_t), block.seed, stream_, counter_);
  }
  /// Blocks whose stamp was overwritten, by index.
  std::vector<std::size_t> damaged_blocks() {
    std::vector<std::size_t> damaged;
    for (std::size_t i = 0; i < blocks_.size(); ++i)
      if (mismatches(blocks_[i]) != 0) damaged.push_back(i);
    return damaged;
  }

  [[nodiscard]] std::size_t block_count() const noexcept { return blocks_.size(); }
  [[nodiscard]] std::size_t bytes() const noexcept {
    std::size_t total = 0;
    for (const stamped_block& block : blocks_) total += block.bytes;
    return total;
  }

 private:
  stream_ordered_resource& resource_;
  stream_ref stream_;
  unsigned long long* counter_ = nullptr;
  std::vector<stamped_block> blocks_;
  std::uint32_t next_seed_ = 1;
};

/// Every request of `sizes` is refused with an out_of_memory that names the
/// bytes, the resource and CUDA's answer, and leaves no CUDA error behind.
void expect_every_request_refused(stream_ordered_resource& resource, stream_ref stream,
                                  const std::vector<std::size_t>& sizes) {
  for (const std::size_t bytes : sizes) {
    try {
      void* p = resource.allocate_async(bytes, stream);
      resource.deallocate_async(p, bytes, stream);
      ADD_FAILURE() << "a request of " << bytes << " bytes succeeded on a full " << resource.description();
    } catch (const out_of_memory& error) {
      const std::string message = error.what();
      EXPECT_EQ(error.requested_bytes(), bytes);
      EXPECT_NE(message.find(std::to_string(bytes) + " bytes"), std::string::npos) << message;
      EXPECT_NE(message.find(resource.description()), std::string::npos) << message;
      EXPECT_NE(message.find("cudaErrorMemoryAllocation"), std::string::npos) << message;
    }
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "a refusal of " << bytes << " bytes left a CUDA error behind";
    EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  }
  // The buffer and the pmr paths refuse the same way.
  EXPECT_THROW({ const buffer<std::uint32_t> refused(resource, sizes.back() / sizeof(std::uint32_t), stream); },
               out_of_memory);
  EXPECT_THROW(static_cast<void>(resource.allocate(sizes.back())), out_of_memory);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

/// The whole scenario over a pool: fill, refuse, free half, allocate again, check.
void exhaust_and_recover(pool_resource& pool, const std::vector<std::size_t>& sizes) {
  const cudapmr::stream stream(0);
  {
    filler blocks(pool, stream);
    ASSERT_GT(blocks.fill(sizes), 2u) << "too little memory to fill in blocks of " << sizes.front() << " bytes";
    expect_every_request_refused(pool, stream, {sizes.back(), sizes.front(), sizes.front() * 4});

    const std::vector<std::size_t> freed = blocks.free_every_other();
    stream.synchronize();
    for (const std::size_t bytes : freed)
      EXPECT_TRUE(blocks.try_add(bytes)) << "a freed block of " << bytes << " bytes could not be allocated again";
    EXPECT_EQ(blocks.damaged_blocks(), std::vector<std::size_t>{}) << "blocks whose stamps were overwritten";
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
  // Everything given back and released, so that later tests find the memory.
  EXPECT_EQ(pool.stats().used_current, 0u);
  pool.trim_to(0);
  EXPECT_EQ(pool.stats().reserved_current, 0u);
}

TEST(Exhaustion, FullGpuRefusesEveryRequestAndRecovers) {
  CUDAPMR_REQUIRE_GPU();
  const device gpu(0);
  const std::size_t free_before = gpu.free_memory();
  {
    // An owned pool that may take the whole GPU; capped under compute-sanitizer.
    const std::size_t cap = under_compute_sanitizer() ? 4 * gibibyte : 0;
    device_memory_resource pool(0, device_pool_options{.max_size = cap});
    exhaust_and_recover(pool, {4 * gibibyte, gibibyte, 256 * mebibyte, 64 * mebibyte, 16 * mebibyte, 2 * mebibyte});
  }
  // The pool is gone and trimmed: the memory is back (what CUDA itself keeps may
  // move a little). Not under the sanitizer script, whose shards share the GPU.
  if (!under_compute_sanitizer()) {
    EXPECT_GE(gpu.free_memory() + 256 * mebibyte, free_before);
  }
}

TEST(Exhaustion, CappedPinnedPoolRefusesEveryRequestAndRecovers) {
  CUDAPMR_REQUIRE_GPU();
  pinned_memory_resource pool(pinned_pool_options{.max_size = gibibyte});
  exhaust_and_recover(pool, {64 * mebibyte, 2 * mebibyte});
}

/// Fills `top` with `block`-byte allocations, alternating `streams`, until it
/// refuses; prints the refusal with its report and returns the report. The
/// blocks stay allocated in `held`.
out_of_memory_report fill_until_explained_refusal(stream_ordered_resource& top, std::size_t block,
                                                  const std::vector<stream_ref>& streams,
                                                  std::vector<std::pair<void*, stream_ref>>& held) {
  for (std::size_t i = 0;; ++i) {
    const stream_ref stream = streams[i % streams.size()];
    try {
      held.emplace_back(top.allocate_async(block, stream), stream);
    } catch (const out_of_memory& error) {
      std::cout << "provoked " << error.what() << '\n';
      EXPECT_EQ(error.requested_bytes(), block);
      if (error.report() == nullptr) {
        ADD_FAILURE() << "the refusal through a history_adaptor carried no report";
        return {};
      }
      return *error.report();
    }
  }
}

/// The fields every report of such a fill must have.
void expect_report_of_fill(const out_of_memory_report& report, std::size_t block, std::size_t blocks_held,
                           const std::vector<stream_ref>& streams) {
  EXPECT_EQ(report.requested_bytes, block);
  EXPECT_EQ(report.alignment, default_alignment);
  EXPECT_EQ(report.live_blocks, blocks_held);
  EXPECT_EQ(report.live_bytes, blocks_held * block);
  EXPECT_TRUE(report.live_complete);
  ASSERT_EQ(report.top_streams.size(), std::min(streams.size(), blocks_held));
  EXPECT_GE(report.top_streams[0].bytes, report.top_streams.back().bytes) << "largest holder first";
  ASSERT_FALSE(report.top_call_sites.empty());
  EXPECT_EQ(report.top_call_sites[0].bytes, blocks_held * block) << "every block came from one place";
  EXPECT_EQ(report.top_call_sites[0].call_site.find("unknown"), std::string::npos) << "call stacks were captured";
  ASSERT_GE(report.state.resources.size(), 3u);
  EXPECT_EQ(report.state.resources[0].name, "history_adaptor");
  EXPECT_EQ(report.state.resources[1].name, "caching_resource");
  for (const char* part : {"out-of-memory report", "live: ", "resources, top first:", "caching_resource"})
    EXPECT_NE(report.text.find(part), std::string::npos) << report.text;
}

TEST(Exhaustion, HostStackRefusalCarriesItsReport) {
  host_memory_resource leaf(8 * mebibyte);
  caching_resource cache(leaf);
  history_adaptor history(cache, {.capture_call_stacks = true});
  const std::vector<stream_ref> streams{stream_ref(reinterpret_cast<cudaStream_t>(0x1000)),
                                        stream_ref(reinterpret_cast<cudaStream_t>(0x2000))};
  std::vector<std::pair<void*, stream_ref>> held;
  const out_of_memory_report report = fill_until_explained_refusal(history, mebibyte, streams, held);
  expect_report_of_fill(report, mebibyte, held.size(), streams);
  EXPECT_EQ(held.size(), 8u);
  EXPECT_TRUE(report.refused_by_cap) << "the host resource's capacity is full of live blocks";
  EXPECT_FALSE(report.trimming_would_make_room);
  EXPECT_FALSE(report.device_free_bytes.has_value()) << "pageable memory is no device's";
  for (const auto& [p, stream] : held) history.deallocate_async(p, mebibyte, stream);
}

TEST(Exhaustion, DevicePoolRefusalCarriesItsReportWithTheDevicesFreeMemory) {
  CUDAPMR_REQUIRE_GPU();
  device_memory_resource pool(0, device_pool_options{.max_size = 64 * mebibyte});
  caching_resource cache(pool);
  history_adaptor history(cache, {.capture_call_stacks = true});
  const cudapmr::stream first(0);
  const cudapmr::stream second(0);
  const std::vector<stream_ref> streams{first.ref(), second.ref()};
  std::vector<std::pair<void*, stream_ref>> held;
  const out_of_memory_report report = fill_until_explained_refusal(history, 4 * mebibyte, streams, held);
  expect_report_of_fill(report, 4 * mebibyte, held.size(), streams);
  EXPECT_TRUE(report.device_free_bytes.has_value());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the report left a CUDA error behind";
  for (const auto& [p, stream] : held) history.deallocate_async(p, 4 * mebibyte, stream);
  first.synchronize();
  second.synchronize();
}

TEST(Exhaustion, AnOverAlignedRefusalNamesTheBytesAskedNotThePaddedRequest) {
  // The pool is asked for the bytes plus alignment padding; its refusal named that sum.
  CUDAPMR_REQUIRE_GPU();
  device_memory_resource pool(0, device_pool_options{.max_size = 64 * mebibyte});
  const std::size_t asked = 100 * mebibyte;
  const std::size_t alignment = 4096;
  try {
    static_cast<void>(pool.allocate_async(asked, alignment, stream_ref{}));
    ADD_FAILURE() << "a pool capped at 64 MiB gave 100 MiB";
  } catch (const out_of_memory& refusal) {
    const std::string message = refusal.what();
    EXPECT_EQ(refusal.requested_bytes(), asked);
    EXPECT_NE(message.find(std::to_string(asked) + " bytes (alignment 4096)"), std::string::npos) << message;
    EXPECT_EQ(message.find(std::to_string(asked + alignment - 256)), std::string::npos) << message;
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace cudapmr::test
