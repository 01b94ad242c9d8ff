// SPDX-License-Identifier: Apache-2.0
// The host thread pool and the host copies split over it: all host-only.
#include "support/gpu.hpp"

#include <cudapmr/detail/host_thread_pool.hpp>

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

namespace cudapmr::detail {
namespace {

constexpr std::size_t mebibyte = std::size_t{1} << 20;

TEST(Partition, PiecesCoverTheRangeInOrderOnGranuleBoundaries) {
  for (const std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{4095}, std::size_t{4096},
                                  std::size_t{4097}, mebibyte, mebibyte + 13, 16 * mebibyte + 1,
                                  std::numeric_limits<std::size_t>::max() - 100,  // the last granule's end overflows
                                  std::numeric_limits<std::size_t>::max()}) {
    for (const std::size_t parts : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{7}, std::size_t{64}}) {
      std::size_t expected_offset = 0;
      std::size_t largest = 0;
      std::size_t smallest_but_last = bytes;
      for (std::size_t index = 0; index < parts; ++index) {
        const byte_range piece = partition(bytes, parts, index, host_copy_granule);
        ASSERT_EQ(piece.offset, expected_offset) << bytes << " bytes, piece " << index << " of " << parts;
        if (piece.bytes > 0) {  // empty pieces sit at the end of the range
          EXPECT_EQ(piece.offset % host_copy_granule, 0u) << bytes << " bytes, piece " << index << " of " << parts;
        }
        expected_offset += piece.bytes;
        largest = std::max(largest, piece.bytes);
        if (index + 1 < parts && piece.bytes > 0) smallest_but_last = std::min(smallest_but_last, piece.bytes);
      }
      EXPECT_EQ(expected_offset, bytes) << bytes << " bytes in " << parts << " pieces";
      if (bytes >= parts * host_copy_granule) {
        EXPECT_LE(largest - smallest_but_last, host_copy_granule) << bytes << " bytes in " << parts << " pieces";
      }
    }
  }
}

TEST(Partition, PiecesAreEmptyOnlyWhenThereAreFewerGranulesThanPieces) {
  EXPECT_EQ(partition(3 * host_copy_granule, 4, 3, host_copy_granule), (byte_range{3 * host_copy_granule, 0}));
  EXPECT_EQ(partition(3 * host_copy_granule + 1, 4, 3, host_copy_granule), (byte_range{3 * host_copy_granule, 1}));
  EXPECT_EQ(partition(10, 1, 0, host_copy_granule), (byte_range{0, 10}));
}

TEST(HostCopyParts, PiecesAreLargeEnoughAndAFewPerThread) {
  EXPECT_EQ(host_copy_parts(64 * mebibyte, 1), 1u) << "one thread needs no split";
  EXPECT_EQ(host_copy_parts(min_host_copy_part - 1, 16), 1u);
  EXPECT_EQ(host_copy_parts(mebibyte, 16), mebibyte / min_host_copy_part);
  EXPECT_EQ(host_copy_parts(16 * mebibyte, 16), 16 * host_copy_parts_per_thread);
  EXPECT_EQ(host_copy_parts(std::size_t{1} << 40, 4), 4 * host_copy_parts_per_thread);
}

TEST(HostCopyThreads, AllHardwareThreadsUpToTheCap) {
  EXPECT_EQ(host_copy_threads(0), 1u) << "unknown hardware: the caller alone";
  EXPECT_EQ(host_copy_threads(2), 2u);
  EXPECT_EQ(host_copy_threads(16), 16u);
  EXPECT_EQ(host_copy_threads(192), max_host_copy_threads);
}

TEST(HostThreadPool, AForkedChildCopiesAgainAndExits) {
  // The tool's library, injected into this process, is inherited by a child
  // it did not launch; on the H200 such children exited with errors of the tool's.
  if (cudapmr::test::under_compute_sanitizer()) GTEST_SKIP() << "compute-sanitizer does not follow a forked child";
  // The library's copy pool, with its workers started by a copy here.
  std::vector<unsigned char> source(std::size_t{16} << 20), destination(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) source[i] = static_cast<unsigned char>(i * 13);
  parallel_memcpy(destination.data(), source.data(), source.size(), host_copy_pool());
  ASSERT_EQ(destination, source);

  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Uses the pool again, then exits: the parent's workers do not exist
    // here, and nothing may wait for them.
    std::vector<unsigned char> again(source.size());
    parallel_memcpy(again.data(), source.data(), source.size(), host_copy_pool());
    std::exit(again == source ? 0 : 1);
  }
  int status = 0;
  pid_t ended = 0;
  for (int waited_ms = 0; waited_ms < 20000 && ended == 0; waited_ms += 10) {
    ended = ::waitpid(child, &status, WNOHANG);
    if (ended == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (ended == 0) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
    FAIL() << "the forked child hung (joining its parent's copy threads at exit?)";
  }
  ASSERT_TRUE(WIFEXITED(status)) << "the child ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's copy came out wrong";
  // The parent's pool still works.
  std::fill(destination.begin(), destination.end(), 0);
  parallel_memcpy(destination.data(), source.data(), source.size(), host_copy_pool());
  EXPECT_EQ(destination, source);
}

TEST(HostThreadPool, ConcurrencyCountsTheCaller) {
  EXPECT_EQ(host_thread_pool(4).concurrency(), 4u);
  EXPECT_EQ(host_thread_pool(1).concurrency(), 1u);
  EXPECT_EQ(host_thread_pool(0).concurrency(), 1u);
  EXPECT_EQ(host_copy_pool().concurrency(), host_copy_threads(std::thread::hardware_concurrency()));
}

TEST(HostThreadPool, RunsEveryPartExactlyOnce) {
  host_thread_pool pool(4);
  for (const std::size_t parts : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{5}, std::size_t{1000}}) {
    std::vector<std::atomic<int>> runs(parts);
    pool.run(parts, [&runs](std::size_t part) { runs[part].fetch_add(1); });
    for (std::size_t part = 0; part < parts; ++part)
      EXPECT_EQ(runs[part].load(), 1) << "part " << part << " of " << parts;
  }
}

TEST(HostThreadPool, PartsRunOnSeveralThreadsAtOnce) {
  host_thread_pool pool(3);
  std::atomic<int> inside{0};
  std::atomic<bool> overlapped{false};
  std::mutex mutex;
  std::set<std::thread::id> threads;
  pool.run(2, [&](std::size_t) {
    {
      const std::lock_guard lock(mutex);
      threads.insert(std::this_thread::get_id());
    }
    inside.fetch_add(1);
    // Each part waits for the other: only two threads at once can finish.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (inside.load() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    if (inside.load() >= 2) overlapped = true;
  });
  EXPECT_TRUE(overlapped.load()) << "the two parts never ran at the same time";
  EXPECT_EQ(threads.size(), 2u);
}

TEST(HostThreadPool, OneThreadRunsEverythingOnTheCaller) {
  host_thread_pool pool(1);
  std::set<std::thread::id> threads;
  pool.run(10, [&threads](std::size_t) { threads.insert(std::this_thread::get_id()); });
  EXPECT_EQ(threads, std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST(HostThreadPool, RethrowsTheFirstExceptionOnceEveryPartHasRun) {
  for (const std::size_t threads : {std::size_t{1}, std::size_t{4}}) {
    host_thread_pool pool(threads);
    std::atomic<int> runs{0};
    try {
      pool.run(100, [&runs](std::size_t part) {
        runs.fetch_add(1);
        if (part == 7) throw std::runtime_error("part 7 failed");
      });
      ADD_FAILURE() << "the exception was lost with " << threads << " threads";
    } catch (const std::runtime_error& error) {
      EXPECT_STREQ(error.what(), "part 7 failed");
    }
    EXPECT_EQ(runs.load(), 100) << threads << " threads";
  }
}

TEST(HostThreadPool, ServesSeveralSubmittersAtOnce) {
  host_thread_pool pool(4);
  std::atomic<std::uint64_t> total{0};
  std::vector<std::thread> submitters;
  for (int submitter = 0; submitter < 4; ++submitter) {
    submitters.emplace_back([&pool, &total] {
      for (int job = 0; job < 200; ++job)
        pool.run(17, [&total](std::size_t part) { total.fetch_add(part + 1); });
    });
  }
  for (std::thread& submitter : submitters) submitter.join();
  EXPECT_EQ(total.load(), 4u * 200u * (17u * 18u / 2u));
}

TEST(HostThreadPool, DestructionJoinsIdleAndJustUsedWorkers) {
  for (int round = 0; round < 50; ++round) {
    host_thread_pool pool(4);
    if (round % 2 == 0) pool.run(8, [](std::size_t) {});
  }
}

TEST(ParallelMemcpy, CopiesOddSizesAtOddOffsetsAndNothingElse) {
  host_thread_pool pool(4);
  for (const std::size_t bytes : {std::size_t{1}, std::size_t{4097}, mebibyte + 13, 5 * mebibyte + 3}) {
    std::vector<unsigned char> source(bytes + 8);
    for (std::size_t i = 0; i < source.size(); ++i) source[i] = static_cast<unsigned char>((i * 131 + 7) % 251);
    std::vector<unsigned char> destination(bytes + 16, 0xee);
    parallel_memcpy(destination.data() + 5, source.data() + 3, bytes, pool);
    EXPECT_EQ(std::memcmp(destination.data() + 5, source.data() + 3, bytes), 0) << bytes << " bytes";
    for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(destination[i], 0xee) << "byte " << i << " before the copy";
    for (std::size_t i = bytes + 5; i < destination.size(); ++i)
      EXPECT_EQ(destination[i], 0xee) << "byte " << i << " after the copy of " << bytes;
  }
}

TEST(ParallelMemcpy, TheLibraryPoolCopiesToo) {
  std::vector<std::uint32_t> source(3 * mebibyte / 4 + 1);
  for (std::size_t i = 0; i < source.size(); ++i) source[i] = static_cast<std::uint32_t>(i * 2654435761u);
  std::vector<std::uint32_t> destination(source.size());
  parallel_memcpy(destination.data(), source.data(), source.size() * sizeof(std::uint32_t), host_copy_pool());
  EXPECT_EQ(destination, source);
}

}  // namespace
}  // namespace cudapmr::detail
