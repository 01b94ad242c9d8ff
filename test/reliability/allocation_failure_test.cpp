// SPDX-License-Identifier: Apache-2.0
// When the host runs out of memory in the middle of a cache's eviction, every
// block still either stays cached or goes back upstream: none is lost. A
// program of its own, because it replaces the global operator new (which
// fails on demand, on the test's thread only). The caches on the host: the
// host resource with made-up streams and a stand-in for CUDA's events; the
// virtual-memory leaf on a GPU (skipped without one; test/gpu_checks/suite.sh).
// Each case replays one operation with the first, second, ... allocation
// inside it failing (alone, and with every one after it), until the operation
// makes no allocation that fails.
#include "support/fake_ordering.hpp"

#include <cudapmr/adaptors/caching_resource.hpp>
#include <cudapmr/device.hpp>
#include <cudapmr/host_memory_resource.hpp>
#include <cudapmr/stream.hpp>
#include <cudapmr/virtual_memory_resource.hpp>

#include <cuda_runtime_api.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

// -1: allocations succeed. n >= 0: n more succeed, then one fails (and,
// unless only_one_fails, every one after it).
thread_local long allocations_before_failure = -1;
thread_local bool only_one_fails = false;
thread_local long failed_allocations = 0;

bool fail_this_allocation() noexcept {
  if (allocations_before_failure < 0) return false;
  if (allocations_before_failure == 0) {
    ++failed_allocations;
    if (only_one_fails) allocations_before_failure = -1;
    return true;
  }
  --allocations_before_failure;
  return false;
}

void* allocate_or_null(std::size_t bytes, std::size_t alignment) noexcept {
  if (fail_this_allocation()) return nullptr;
  if (bytes == 0) bytes = 1;
  if (alignment <= alignof(std::max_align_t)) return std::malloc(bytes);
  return std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
}

void* allocate_or_throw(std::size_t bytes, std::size_t alignment) {
  if (void* p = allocate_or_null(bytes, alignment)) return p;
  throw std::bad_alloc();
}

}  // namespace

void* operator new(std::size_t bytes) { return allocate_or_throw(bytes, 0); }
void* operator new(std::size_t bytes, std::align_val_t alignment) {
  return allocate_or_throw(bytes, static_cast<std::size_t>(alignment));
}
void* operator new(std::size_t bytes, const std::nothrow_t&) noexcept { return allocate_or_null(bytes, 0); }
void* operator new(std::size_t bytes, std::align_val_t alignment, const std::nothrow_t&) noexcept {
  return allocate_or_null(bytes, static_cast<std::size_t>(alignment));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

namespace cudapmr::test {
namespace {

/// A cache over the host resource holding blocks of many classes, freed on
/// three streams: some kept by their stream, some offered to all with
/// events not yet complete, some freed through the pmr path (no work
/// touches them); and blocks still live.
struct cache_under_test {
  fake_ordering ordering;
  host_memory_resource upstream;
  std::unique_ptr<caching_resource> cache;
  struct block {
    void* pointer;
    std::size_t bytes;
    stream_ref stream;
  };
  std::vector<block> live;

  explicit cache_under_test(caching_options options) {
    // The stand-in's own lists grow inside noexcept calls: room first.
    ordering.events.reserve(4096);
    ordering.waits.reserve(4096);
    options.max_cached_block = std::size_t{1} << 20;
    options.stream_share = std::size_t{4} << 20;  // past what a stream frees here: its first frees alone are sealed
    options.hand_back_before_large = true;
    cache = std::make_unique<caching_resource>(upstream, options, ordering);
    for (std::size_t i = 0; i < 96; ++i) allocate((std::size_t{16} << 10) * (1 + i % 24), fake_stream(1 + i % 3));
    // Freed on another stream than they were used on, a third of them: the
    // frees past a stream's share are sealed with events that stay pending.
    // One in eight through the pmr path, as a block no work touches.
    for (std::size_t i = 0; i < 64; ++i) {
      const block freed = live.back();
      live.pop_back();
      if (i % 8 == 7)
        cache->deallocate(freed.pointer, freed.bytes);
      else
        cache->deallocate_async(freed.pointer, freed.bytes, i % 3 == 0 ? fake_stream(1 + (i + 1) % 3) : freed.stream);
    }
  }

  void allocate(std::size_t bytes, stream_ref stream) {
    void* p = cache->allocate_async(bytes, stream);
    live.push_back({p, bytes, stream});
  }

  void free_live() {
    while (!live.empty()) {
      cache->deallocate_async(live.back().pointer, live.back().bytes, live.back().stream);
      live.pop_back();
    }
  }

  [[nodiscard]] std::size_t cached_bytes() const { return cache->statistics().cached_bytes; }
  /// Blocks freed through the pmr path are cached for no stream.
  [[nodiscard]] std::size_t ready_bytes() const {
    std::size_t bytes = 0;
    for (const auto& [stream, cached] : cache->cached_bytes_by_stream())
      if (stream == nullptr) bytes += cached;
    return bytes;
  }
};

/// Where a trim follows what is live: at most as much as is live.
caching_options following_what_is_live() {
  return {.max_cached_bytes = std::size_t{64} << 20, .max_cached_per_live = 1.0};
}
/// Where what was lately live keeps the cache at its budget: a miss makes room.
caching_options at_its_budget() { return {.max_cached_bytes = std::size_t{4} << 20}; }
/// Where the budget refuses nothing: the streams keep their last frees unsealed.
caching_options roomy() { return {.max_cached_bytes = std::size_t{64} << 20}; }

/// What an operation promises once it returns without an exception.
enum class promise {
  nothing_lost,  // every block is cached or back upstream
  empties_the_cache,  // and none is cached (release, trim)
};

/// Runs `operation` on a fresh cache with the n-th allocation on this thread
/// failing, alone and with all after it, for n = 0, 1, ...; then, with memory
/// back, frees what is live and releases the cache: the upstream must hold
/// nothing. Stops at the first n whose operation made no allocation that
/// failed; that run must have given something back (`measure` fell), or the
/// case shows nothing.
void never_loses_a_block(const std::string& what, const caching_options& options,
                         const std::function<void(cache_under_test&)>& operation,
                         const std::function<std::size_t(const cache_under_test&)>& measure,
                         promise kept = promise::nothing_lost) {
  for (const bool alone : {true, false}) {
    for (long n = 0;; ++n) {
      SCOPED_TRACE(what + ", allocation " + std::to_string(n) + (alone ? " failing alone" : " and all after it failing"));
      cache_under_test scene(options);
      // (Where the cache follows what is live, the setup's own trims take them first.)
      if (!options.max_cached_per_live) {
        ASSERT_GT(scene.ready_bytes(), 0u) << "the scene lacks blocks freed through the pmr path";
      }
      const std::size_t before = measure(scene);
      failed_allocations = 0;
      only_one_fails = alone;
      allocations_before_failure = n;
      bool refused = false;
      try {
        operation(scene);
      } catch (const std::bad_alloc&) {  // an operation may refuse for want of memory: nothing may go missing
        refused = true;
      }
      allocations_before_failure = -1;
      const long failures = failed_allocations;
      const std::size_t after = measure(scene);
      if (kept == promise::empties_the_cache && !refused) {
        ASSERT_EQ(scene.cached_bytes(), 0u) << "returned as if it had emptied the cache";
      }
      scene.free_live();
      scene.ordering.complete_all();
      scene.cache->release();
      ASSERT_EQ(scene.cached_bytes(), 0u);
      ASSERT_EQ(scene.upstream.used_bytes(), 0u) << "blocks lost between the cache and its upstream";
      if (failures == 0) {
        EXPECT_LT(after, before) << "the operation gave nothing back: the case shows nothing";
        break;
      }
      ASSERT_LT(n, 10'000) << "the operation kept allocating";
    }
  }
}

std::size_t upstream_bytes(const cache_under_test& scene) { return scene.upstream.used_bytes(); }
std::size_t cached_bytes(const cache_under_test& scene) { return scene.cached_bytes(); }

TEST(AllocationFailure, FreesThatTrimTheCacheToWhatIsLiveLoseNoBlock) {
  never_loses_a_block("frees over the line", following_what_is_live(),
                      [](cache_under_test& scene) { scene.free_live(); }, upstream_bytes);
}

TEST(AllocationFailure, AMissThatMakesRoomLosesNoBlock) {
  never_loses_a_block("a miss at the budget", at_its_budget(),
                      [](cache_under_test& scene) { scene.allocate(std::size_t{1} << 20, fake_stream(2)); },
                      cached_bytes);
}

TEST(AllocationFailure, ALargeRequestThatHandsBackItsStreamsBlocksLosesNoBlock) {
  never_loses_a_block("a request past the cached sizes", roomy(),
                      [](cache_under_test& scene) { scene.allocate(std::size_t{2} << 20, fake_stream(1)); },
                      cached_bytes);
}

TEST(AllocationFailure, ATrimLosesNoBlock) {
  never_loses_a_block("trim", roomy(), [](cache_under_test& scene) { scene.cache->trim(fake_stream(1)); },
                      cached_bytes, promise::empties_the_cache);
}

TEST(AllocationFailure, AReleaseWithoutWaitingLosesNoBlock) {
  never_loses_a_block("release without waiting", roomy(),
                      [](cache_under_test& scene) { scene.cache->release_without_waiting(); }, cached_bytes);
}

TEST(AllocationFailure, AReleaseLosesNoBlock) {
  never_loses_a_block("release", roomy(), [](cache_under_test& scene) { scene.cache->release(); },
                      cached_bytes, promise::empties_the_cache);
}

/// Blocks of 64 KiB that one stream allocated from a cache over the host, for
/// the cases where a free on that stream comes in the middle of another
/// operation, after which the host has no memory.
struct one_stream_scene {
  static constexpr std::size_t bytes = std::size_t{64} << 10;
  fake_ordering ordering;
  host_memory_resource upstream;
  std::optional<caching_resource> cache;
  const stream_ref stream = fake_stream(7);
  std::vector<void*> blocks;
  bool freed_meanwhile = false;

  explicit one_stream_scene(std::size_t count) {
    ordering.events.reserve(64);
    cache.emplace(upstream, roomy(), ordering);
    for (std::size_t i = 0; i < count; ++i) blocks.push_back(cache->allocate_async(bytes, stream));
  }
  void free(std::size_t index) { cache->deallocate_async(blocks[index], bytes, stream); }
  /// What runs in the middle: the free of `index`, then every allocation fails.
  std::function<void()> free_then_run_out(std::size_t index) {
    return [this, index] {
      free(index);
      freed_meanwhile = true;
      failed_allocations = 0;
      only_one_fails = false;
      allocations_before_failure = 0;
    };
  }
  /// With memory back: `cached` blocks are still cached, and once they are
  /// released the upstream holds nothing.
  void expect_nothing_lost(std::size_t cached) {
    allocations_before_failure = -1;
    EXPECT_EQ(cache->statistics().cached_bytes, cached * bytes) << "blocks lost between the cache and its upstream";
    ordering.synchronize_fails = false;
    ordering.complete_all();
    cache->release();
    cache.reset();
    EXPECT_EQ(upstream.used_bytes(), 0u) << "blocks lost between the cache and its upstream";
  }
};

// A free that seals its stream's blocks lets go of the stream's lock while
// it records the event; other frees on the stream fill the list meanwhile. If
// the host then has no memory for the seal, the blocks go back to the stream
// into room kept for them, not into a list that must grow.
TEST(AllocationFailure, ASealThatFailsWhileItsStreamFreesMoreLosesNoBlock) {
  one_stream_scene scene(3);
  scene.free(0);  // a new stream's first frees are sealed
  scene.ordering.during_record = scene.free_then_run_out(2);  // past the first frees: kept unsealed
  scene.free(1);
  ASSERT_TRUE(scene.freed_meanwhile) << "the second free sealed nothing: the case shows nothing";
  ASSERT_EQ(scene.ordering.events.size(), 1u) << "the seal found memory for its event: the case shows nothing";
  scene.expect_nothing_lost(3);
}

// As above, for a drain (release) that takes the streams' blocks, then waits
// for every device: a free on one of them fills its list during the wait, the
// wait fails, and the host has no memory when the blocks go back.
TEST(AllocationFailure, ADrainWhoseWaitFailsWhileItsStreamFreesMoreLosesNoBlock) {
  one_stream_scene scene(4);
  for (std::size_t i = 0; i < 3; ++i) scene.free(i);  // the first two sealed, the third kept unsealed
  scene.ordering.synchronize_fails = true;
  scene.ordering.during_synchronize = scene.free_then_run_out(3);
  EXPECT_ANY_THROW(scene.cache->release());
  ASSERT_TRUE(scene.freed_meanwhile) << "the release did not wait: the case shows nothing";
  scene.expect_nothing_lost(4);
}

// The virtual-memory leaf, on a GPU: sorting its pending frees (one whose
// work is done, one held back) with the host out of memory loses no range.
// Each range either is unmapped or stays pending: once all the work is done
// and the leaf releases, nothing stays mapped, and the addresses serve again.

/// Holds back the work queued on a stream after it until opened (a host
/// function that waits, at most a minute), made with no allocation that can fail.
class held_stream {
 public:
  explicit held_stream(stream_ref stream) {
    holding_ = cudaLaunchHostFunc(stream.get(), &hold, &opened_) == cudaSuccess;
  }
  ~held_stream() { open(); }
  held_stream(const held_stream&) = delete;
  held_stream& operator=(const held_stream&) = delete;
  void open() noexcept { opened_.store(true, std::memory_order_release); }
  [[nodiscard]] bool holding() const noexcept { return holding_; }

 private:
  static void CUDART_CB hold(void* opened) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(1);
    while (!static_cast<std::atomic<bool>*>(opened)->load(std::memory_order_acquire) &&
           std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::atomic<bool> opened_{false};
  bool holding_ = false;
};

TEST(AllocationFailure, SortingTheLeafsPendingFreesLosesNoRange) {
  if (device::count() == 0) GTEST_SKIP() << "no CUDA device";
  constexpr std::size_t bytes = std::size_t{2} << 20;
  for (const bool alone : {true, false}) {
    for (long n = 0;; ++n) {
      SCOPED_TRACE("allocation " + std::to_string(n) + (alone ? " failing alone" : " and all after it failing"));
      long failures = 0;
      {
        virtual_memory_resource leaf(0, {.reserve_bytes = std::size_t{64} << 20});
        const stream s(0);
        void* finished = leaf.allocate_async(bytes, s);
        void* waiting = leaf.allocate_async(bytes, s);
        // One stream, two gates in its order (host functions of different
        // streams may share one CUDA thread, so a second stream's gate could
        // hold the first's back): the first free's work done, the second's held.
        held_stream first_gate(s);
        leaf.deallocate_async(finished, bytes, s);
        cudaEvent_t first_done = nullptr;
        ASSERT_EQ(cudaEventCreateWithFlags(&first_done, cudaEventDisableTiming), cudaSuccess);
        ASSERT_EQ(cudaEventRecord(first_done, s.get()), cudaSuccess);
        held_stream second_gate(s);
        ASSERT_TRUE(first_gate.holding() && second_gate.holding()) << "cudaLaunchHostFunc failed";
        leaf.deallocate_async(waiting, bytes, s);
        first_gate.open();
        ASSERT_EQ(cudaEventSynchronize(first_done), cudaSuccess);
        static_cast<void>(cudaEventDestroy(first_done));
        ASSERT_EQ(leaf.pending_bytes(), 2 * bytes) << "the frees were not both pending: the case shows nothing";

        failed_allocations = 0;
        only_one_fails = alone;
        allocations_before_failure = n;
        leaf.unmap_completed();
        allocations_before_failure = -1;
        failures = failed_allocations;

        second_gate.open();
        s.synchronize();
        leaf.release_completed();
        EXPECT_EQ(leaf.pending_bytes(), 0u);
        EXPECT_EQ(leaf.mapped_bytes(), 0u) << "a range's pages stayed mapped, out of every list";
        EXPECT_EQ(leaf.mappings(), 0u);
        // The freed addresses serve again, mapped anew.
        void* again = leaf.allocate_async(2 * bytes, s);
        EXPECT_EQ(leaf.mapped_bytes(), 2 * bytes);
        leaf.deallocate_async(again, 2 * bytes, s);
        s.synchronize();
      }
      if (failures == 0) break;
      ASSERT_LT(n, 100) << "the unmap kept allocating";
    }
  }
}

}  // namespace
}  // namespace cudapmr::test
