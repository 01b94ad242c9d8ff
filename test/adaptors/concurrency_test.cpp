// SPDX-License-Identifier: Apache-2.0
// Stacks of adaptors and caches over the host resource, hammered by eight
// threads at once with random allocations and frees, a block often freed by
// another thread than the one that got it; then every layer's own account
// must match what the threads did. Host-only, so that ThreadSanitizer runs
// them where there is no GPU (CMakePresets.json "tsan").
#include "support/fake_ordering.hpp"
#include "support/resource_cases.hpp"

#include <cudapmr/adaptors/caching_resource.hpp>
#include <cudapmr/adaptors/coalescing_resource.hpp>
#include <cudapmr/adaptors/history_adaptor.hpp>
#include <cudapmr/adaptors/limiting_adaptor.hpp>
#include <cudapmr/adaptors/logging_adaptor.hpp>
#include <cudapmr/adaptors/statistics_adaptor.hpp>
#include <cudapmr/adaptors/tracking_adaptor.hpp>
#include <cudapmr/device_stack.hpp>
#include <cudapmr/host_memory_resource.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <latch>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace cudapmr::test {
namespace {

constexpr int thread_count = 8;
constexpr int operations_per_thread = 4000;
constexpr std::size_t largest_request = 256 * 1024;

/// A block some thread got and any thread may free.
struct live_block {
  std::byte* pointer = nullptr;
  std::size_t bytes = 0;
  std::size_t alignment = 0;
  stream_ref stream{cudaStream_t{}};
  bool through_pmr = false;  // allocate/deallocate on the bound stream, not the _async calls
  int owner = 0;             // the thread that got it
  std::byte mark{};          // written at both ends of the block by that thread
};

/// What the threads did, added up.
struct hammer_totals {
  std::uint64_t allocations = 0;
  std::uint64_t bytes = 0;
  std::uint64_t freed_by_another_thread = 0;
  std::uint64_t overwritten = 0;  // blocks whose marks another block's user changed
};

/// Blocks handed to one thread to free.
struct inbox {
  std::mutex mutex;
  std::vector<live_block> blocks;  // guarded by mutex
};

/// Runs `thread_count` threads, started together, of random allocations (1
/// byte to 256 KiB, four alignments, four streams, now and then through pmr)
/// and frees. Each block goes to the inbox of a random other thread, which
/// frees it on the stream it was allocated on. Each block is marked at both
/// ends when got and checked when freed, so that a block handed out twice at
/// once shows (and the race on it, to TSan). A thread done with its share
/// keeps emptying its inbox until all are done; what is left at the end is
/// freed here.
hammer_totals hammer(stream_ordered_resource& top) {
  std::vector<inbox> inboxes(thread_count);
  std::atomic<std::uint64_t> allocations{0}, bytes{0}, freed_by_another{0}, overwritten{0};
  std::atomic<int> running{thread_count};
  std::latch start(thread_count);

  auto free_block = [&](const live_block& block) {
    if (block.pointer[0] != block.mark || block.pointer[block.bytes - 1] != block.mark) ++overwritten;
    if (block.through_pmr) top.deallocate(block.pointer, block.bytes, block.alignment);
    else top.deallocate_async(block.pointer, block.bytes, block.alignment, block.stream);
  };
  // Takes a random block of `mine` when `now` says so, or when it holds many (so that few stay live).
  auto take = [](inbox& mine, std::mt19937_64& random, bool now) -> std::optional<live_block> {
    const std::lock_guard lock(mine.mutex);
    if (mine.blocks.empty() || (!now && mine.blocks.size() <= 64)) return std::nullopt;
    const std::size_t at = static_cast<std::size_t>(random() % mine.blocks.size());
    const live_block block = mine.blocks[at];
    mine.blocks[at] = mine.blocks.back();
    mine.blocks.pop_back();
    return block;
  };

  std::vector<std::thread> threads;
  for (int index = 0; index < thread_count; ++index) {
    threads.emplace_back([&, index] {
      std::mt19937_64 random(std::uint64_t{0x9e3779b97f4a7c15} * static_cast<std::uint64_t>(index + 1));
      inbox& mine = inboxes[static_cast<std::size_t>(index)];
      auto free_taken = [&](const live_block& block) {
        if (block.owner != index) ++freed_by_another;
        free_block(block);
      };
      start.arrive_and_wait();
      for (int i = 0; i < operations_per_thread; ++i) {
        if (const std::optional<live_block> block = take(mine, random, random() % 2 == 0)) {
          free_taken(*block);
          continue;
        }
        live_block block;
        block.bytes = 1 + static_cast<std::size_t>(random() % (random() % 8 == 0 ? largest_request : 4096));
        block.alignment = std::size_t{16} << (random() % 4);  // 16 to 128
        block.stream = stream_ref(fake_stream(1 + random() % 4));
        block.through_pmr = random() % 8 == 0;
        block.owner = index;
        block.mark = static_cast<std::byte>(index * 32 + i % 32);
        block.pointer = static_cast<std::byte*>(block.through_pmr
                                                    ? top.allocate(block.bytes, block.alignment)
                                                    : top.allocate_async(block.bytes, block.alignment, block.stream));
        block.pointer[0] = block.mark;
        block.pointer[block.bytes - 1] = block.mark;
        ++allocations;
        bytes += block.bytes;
        const auto other = static_cast<std::size_t>(index + 1 + static_cast<int>(random() % (thread_count - 1)));
        inbox& theirs = inboxes[other % thread_count];
        const std::lock_guard lock(theirs.mutex);
        theirs.blocks.push_back(block);
      }
      running.fetch_sub(1);
      while (running.load() > 0) {
        while (const std::optional<live_block> block = take(mine, random, true)) free_taken(*block);
        std::this_thread::yield();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (inbox& left : inboxes)
    for (const live_block& block : left.blocks) free_block(block);
  return {allocations.load(), bytes.load(), freed_by_another.load(), overwritten.load()};
}

/// Checks what every thread saw and what the statistics adaptor on top counted.
void expect_counted(const hammer_totals& totals, const statistics_adaptor& counted) {
  EXPECT_EQ(totals.overwritten, 0u) << "a block's marks changed while it was live: handed out twice";
  EXPECT_GT(totals.freed_by_another_thread, totals.allocations / 2) << "most frees cross threads";
  const resource_statistics statistics = counted.statistics();
  EXPECT_EQ(statistics.allocations.total, static_cast<std::int64_t>(totals.allocations));
  EXPECT_EQ(statistics.bytes.total, static_cast<std::int64_t>(totals.bytes));
  EXPECT_EQ(statistics.allocations.current, 0);
  EXPECT_EQ(statistics.bytes.current, 0);
  EXPECT_GT(statistics.bytes.peak, 0);
  std::int64_t per_stream_total = 0;
  for (const stream_statistics& stream : counted.per_stream()) {
    EXPECT_EQ(stream.statistics.bytes.current, 0) << "every block is freed on the stream it was allocated on";
    per_stream_total += stream.statistics.allocations.total;
  }
  EXPECT_EQ(per_stream_total, static_cast<std::int64_t>(totals.allocations));
}

/// Hammers `resource` through a statistics_adaptor over it, and checks what that counted.
hammer_totals hammer_counted(stream_ordered_resource& resource) {
  statistics_adaptor counted(resource);
  const hammer_totals totals = hammer(counted);
  expect_counted(totals, counted);
  return totals;
}

TEST(Concurrency, EightThreadsOverACachingResource) {
  host_memory_resource upstream;
  caching_resource cache(upstream);
  const hammer_totals totals = hammer_counted(cache);
  const cache_statistics cached = cache.statistics();
  EXPECT_EQ(cached.hits + cached.misses, totals.allocations) << "each request a hit or a miss, counted once";
  EXPECT_GT(cached.hits, 0u);
  cache.release();
  EXPECT_EQ(upstream.used_bytes(), 0u) << "every block came back to the cache, and the cache gave all back";
}

TEST(Concurrency, EightThreadsOverACoalescingResource) {
  host_memory_resource upstream;
  coalescing_resource arena(upstream);
  hammer_counted(arena);
  const coalescing_statistics arena_statistics = arena.statistics();
  EXPECT_EQ(arena_statistics.used_bytes, 0u);
  EXPECT_GT(arena_statistics.used_peak, 0u);
  arena.release();
  EXPECT_EQ(arena.statistics().segment_frees, arena_statistics.segment_allocations);
  EXPECT_EQ(upstream.used_bytes(), 0u) << "every block came back to the arena, and the arena gave all back";
}

TEST(Concurrency, EightThreadsOverTheDefaultStacksShapeWhileAnIdleThreadGivesBack) {
  // device_stack's front and engine over a host leaf, with what its idle
  // thread does running all the while. The front caches blocks up to 64 KiB,
  // not 4 MiB, so that the larger of the hammer's requests hand their
  // stream's blocks back (device_stack's hand-back before large requests)
  // while other threads take, seal and free blocks of the same streams.
  host_memory_resource upstream;
  coalescing_resource arena(upstream, coalescing_options{.max_idle_bytes = mebibyte});
  caching_options front = device_stack_options{}.front;
  ASSERT_TRUE(front.hand_back_before_large);
  front.max_cached_block = 64 * 1024;
  caching_resource cache(arena, front);
  std::atomic<bool> done{false};
  std::thread idle([&] {
    while (!done.load()) {
      static_cast<void>(arena.release_idle());
      std::this_thread::yield();
    }
  });
  hammer_counted(cache);
  done.store(true);
  idle.join();
  cache.release();
  arena.release();
  EXPECT_EQ(upstream.used_bytes(), 0u) << "every block came back, and every segment";
}

TEST(Concurrency, EightThreadsThroughEveryObservingAdaptor) {
  host_memory_resource upstream;
  limiting_adaptor limited(upstream, std::size_t{1} << 40);
  std::atomic<int> misuses{0};
  tracking_adaptor tracked(limited, {.on_misuse = [&misuses](const misuse_report&) { ++misuses; }});
  history_adaptor history(tracked, {.capacity = std::size_t{1} << 17});
  std::ostringstream log;
  hammer_totals totals;
  {
    logging_adaptor logged(history, log);
    totals = hammer_counted(logged);
  }  // the log is flushed
  EXPECT_EQ(misuses.load(), 0) << "no free was taken for a bad one";
  EXPECT_EQ(tracked.outstanding_count(), 0u);
  EXPECT_EQ(limited.used_bytes(), 0u);
  EXPECT_EQ(upstream.used_bytes(), 0u);
  // Allocate, free, and free_completed (pageable memory is free at once): one sequence each, none lost.
  EXPECT_EQ(history.recorded(), 3 * totals.allocations);
  EXPECT_EQ(history.events().size(), 3 * totals.allocations);
  const std::string text = log.str();
  EXPECT_EQ(static_cast<std::uint64_t>(std::count(text.begin(), text.end(), '\n')), 1 + 2 * totals.allocations) << "the header, then each allocation and each free";
}

TEST(Concurrency, EightThreadsThroughEveryAdaptorOverEachCache) {
  host_memory_resource upstream;
  caching_resource cache(upstream);
  coalescing_resource arena(cache);  // the arena's segments come from the cache
  limiting_adaptor limited(arena, std::size_t{1} << 40);
  tracking_adaptor tracked(limited);
  history_adaptor history(tracked, {.capacity = 1024});  // laps its ring many times
  std::ostringstream log;
  {
    logging_adaptor logged(history, log);
    const hammer_totals totals = hammer_counted(logged);
    EXPECT_EQ(history.recorded(), 3 * totals.allocations);
    EXPECT_EQ(history.dropped(), history.recorded() - history.capacity());
  }
  EXPECT_EQ(tracked.outstanding_count(), 0u);
  EXPECT_EQ(limited.used_bytes(), 0u);
  arena.release();
  cache.release();
  EXPECT_EQ(upstream.used_bytes(), 0u);
}

}  // namespace
}  // namespace cudapmr::test
