// SPDX-License-Identifier: Apache-2.0
// No allocation or free path makes the host wait: caching_resource,
// coalescing_resource (idle segments kept, or given back at frees) and the
// default stack's shape (device_stack_options' front over its engine), over
// the host resource and a fake ordering, driven through many sizes, several
// streams, frees on other streams, cross-stream reuse, a stream per request,
// working sets that grow and shrink, and the pmr path. Each call is checked on
// its own: the ordering must see no synchronize of the devices and no wait for
// an event during it. release() and the last resort before out-of-memory may
// wait, and are seen to. The pmr allocate's own cudaStreamSynchronize (after a
// miss, for memory other than pageable) does not go through the ordering: no
// host test can see it.
#include "support/fake_ordering.hpp"
#include "support/stack_shape.hpp"

#include <cudapmr/adaptors/caching_resource.hpp>
#include <cudapmr/adaptors/coalescing_resource.hpp>
#include <cudapmr/adaptors/failure_callback_adaptor.hpp>
#include <cudapmr/host_memory_resource.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace cudapmr::test {
namespace {

constexpr std::size_t mebibyte = std::size_t{1} << 20;
constexpr std::uintptr_t worker_streams = 4;

/// A program's allocations and frees through one resource. Every call is
/// checked: the ordering may see the host wait during it only where the
/// upstream refused memory meanwhile (`upstream_refusals`, when given).
class workload {
 public:
  workload(stream_ordered_resource& resource, fake_ordering& ordering, std::uint64_t seed,
           const std::size_t* upstream_refusals = nullptr)
      : resource_(resource), ordering_(ordering), upstream_refusals_(upstream_refusals), random_(seed) {}

  /// Every phase below, then frees what is left.
  void run_all() {
    random_mix(3000, 192, 23);
    growing_and_shrinking(worker(0));
    stream_per_request(64, 8 * mebibyte);
    stream_per_request(64, mebibyte);
    freed_on_another_stream(500, mebibyte);
    idle_segments(24, 6 * mebibyte);
    pmr_round_trips(400);
    random_mix(2000, 64, 23);
    free_all();
  }

  /// Allocations of 1 byte to 2^`largest_shift` bytes and more (zero bytes and
  /// over-aligned requests among them) on the worker streams, up to `max_live`
  /// live; a third of the frees on another worker stream. The GPU catches up
  /// with one stream now and then. Where the upstream runs out, a block is freed.
  void random_mix(std::size_t operations, std::size_t max_live, std::size_t largest_shift) {
    for (std::size_t step = 0; step < operations; ++step) {
      if (step % 16 == 15) progress();
      if (live_.empty() || (live_.size() < max_live && pick(2) == 0)) {
        const std::size_t bytes = pick(64) == 0 ? 0 : (std::size_t{1} << pick(largest_shift + 1)) + pick(1024);
        try {
          live_.push_back(allocate(bytes, pick(32) == 0 ? 4096 : 256, worker(pick(worker_streams))));
        } catch (const out_of_memory&) {
          if (!live_.empty()) free_live(pick(live_.size()));
        }
      } else {
        free_live(pick(live_.size()));
      }
    }
  }

  /// One buffer grown by a tenth at a time from 1 MiB to 64 MiB and shrunk
  /// back (the new size allocated before the old is freed); then a working
  /// set of 4 KiB to 2 MiB blocks grown by a tenth at a time to 64 MiB and
  /// freed down, in no order, by a tenth at a time. All on `stream`.
  void growing_and_shrinking(cudaStream_t stream) {
    block buffer = allocate(mebibyte, 256, stream);
    for (const bool growing : {true, false}) {
      while (growing ? buffer.bytes < 64 * mebibyte : buffer.bytes > mebibyte) {
        const block resized = allocate(growing ? buffer.bytes + buffer.bytes / 10 : buffer.bytes - buffer.bytes / 11,
                                       256, stream);
        free(buffer, stream);
        buffer = resized;
      }
    }
    free(buffer, stream);
    std::vector<block> held;
    std::size_t live = 0;
    for (std::size_t target = mebibyte; target <= 64 * mebibyte; target += target / 10) {
      while (live < target) {
        held.push_back(allocate(std::size_t{4096} << pick(10), 256, stream));
        live += held.back().bytes;
      }
    }
    for (std::size_t target = live - live / 10; !held.empty(); target -= target / 10) {
      while (live > target && !held.empty()) {
        const std::size_t index = pick(held.size());
        live -= held[index].bytes;
        free(held[index], stream);
        held[index] = held.back();
        held.pop_back();
      }
    }
  }

  /// A new stream for each request, which frees on it; the GPU catches up
  /// with every stream after each eighth request.
  void stream_per_request(std::size_t requests, std::size_t bytes) {
    for (std::size_t request = 0; request < requests; ++request) {
      const cudaStream_t stream = fake_stream(next_stream_++);
      free(allocate(bytes + pick(4096), 256, stream), stream);
      if (request % 8 == 7) ordering_.complete_all();
    }
  }

  /// Allocated on one worker stream, freed on the next.
  void freed_on_another_stream(std::size_t times, std::size_t bytes) {
    for (std::size_t time = 0; time < times; ++time) {
      const std::uintptr_t index = time % worker_streams;
      free(allocate(bytes, 256, worker(index)), worker((index + 1) % worker_streams));
      if (time % 16 == 15) progress();
    }
  }

  /// `count` blocks of `bytes` on one stream, all freed there: what the
  /// resource keeps idle, and what it gives back at the frees.
  void idle_segments(std::size_t count, std::size_t bytes) {
    std::vector<block> held;
    for (std::size_t each = 0; each < count; ++each) held.push_back(allocate(bytes, 256, worker(1)));
    for (const block& each : held) free(each, worker(1));
  }

  /// pmr allocate and deallocate of 512 bytes to 8 MiB, a few held at a time;
  /// half before the bound stream is handed out (blocks ready for any stream),
  /// half after (blocks in its order).
  void pmr_round_trips(std::size_t times) {
    std::vector<block> held;
    for (std::size_t time = 0; time < times; ++time) {
      if (time == times / 2) static_cast<void>(resource_.bound_stream());
      if (held.size() == 8 || (!held.empty() && pick(2) == 0)) {
        const std::size_t index = pick(held.size());
        const block freed = held[index];
        held[index] = held.back();
        held.pop_back();
        checked("pmr deallocate", freed.bytes, nullptr, [&] { resource_.deallocate(freed.pointer, freed.bytes); });
        continue;
      }
      const std::size_t bytes = std::size_t{512} << (pick(16) == 0 ? 14 : pick(8));
      void* p = nullptr;
      checked("pmr allocate", bytes, nullptr, [&] { p = resource_.allocate(bytes); });
      held.push_back({p, bytes, 256, nullptr});
    }
    for (const block& each : held)
      checked("pmr deallocate", each.bytes, nullptr, [&] { resource_.deallocate(each.pointer, each.bytes); });
  }

  /// Frees every live block on its own stream.
  void free_all() {
    for (const block& each : live_) free(each, each.stream);
    live_.clear();
  }

  /// Calls during which the host waited with no refusal upstream: each a failure.
  [[nodiscard]] int calls_that_waited() const noexcept { return calls_that_waited_; }
  /// Calls during which the host waited after the upstream refused: the last resort.
  [[nodiscard]] int waits_on_exhaustion() const noexcept { return waits_on_exhaustion_; }

 private:
  struct block {
    void* pointer;
    std::size_t bytes;
    std::size_t alignment;
    cudaStream_t stream;  // where it was allocated
  };

  static cudaStream_t worker(std::uintptr_t index) { return fake_stream(1 + index); }
  std::size_t pick(std::size_t count) { return std::uniform_int_distribution<std::size_t>(0, count - 1)(random_); }

  /// Runs `call`, then fails the test if the host waited during it with no refusal upstream.
  template <class Call>
  void checked(const char* what, std::size_t bytes, cudaStream_t stream, Call&& call) {
    const int waits = ordering_.synchronizations();
    const std::size_t refusals = upstream_refusals_ == nullptr ? 0 : *upstream_refusals_;
    const auto judge = [&] {
      if (ordering_.synchronizations() == waits) return;
      if (upstream_refusals_ != nullptr && *upstream_refusals_ != refusals) {
        ++waits_on_exhaustion_;
        return;
      }
      if (++calls_that_waited_ <= 5)  // the first few name the call; the count says how many
        ADD_FAILURE() << what << " of " << bytes << " bytes on stream " << stream << " made the host wait ("
                      << ordering_.device_synchronizations << " device-wide synchronizes and "
                      << ordering_.event_synchronizations << " event waits so far)";
    };
    try {
      std::forward<Call>(call)();
    } catch (...) {
      judge();
      throw;
    }
    judge();
  }

  block allocate(std::size_t bytes, std::size_t alignment, cudaStream_t stream) {
    void* p = nullptr;
    checked("allocate_async", bytes, stream, [&] { p = resource_.allocate_async(bytes, alignment, stream); });
    return {p, bytes, alignment, stream};
  }
  void free(const block& freed, cudaStream_t stream) {
    checked("deallocate_async", freed.bytes, stream,
            [&] { resource_.deallocate_async(freed.pointer, freed.bytes, freed.alignment, stream); });
  }
  /// Frees the live block at `index`, on its own stream or, one time in three, another.
  void free_live(std::size_t index) {
    const block freed = live_[index];
    live_[index] = live_.back();
    live_.pop_back();
    free(freed, pick(3) == 0 ? worker(pick(worker_streams)) : freed.stream);
  }
  /// The GPU completes what was queued on one worker stream (every stream, one time in four).
  void progress() {
    if (pick(4) == 0) return ordering_.complete_all();
    const cudaStream_t stream = worker(pick(worker_streams));
    for (const auto& each : ordering_.events)
      if (each->stream == stream) each->completed = true;
  }

  stream_ordered_resource& resource_;
  fake_ordering& ordering_;
  const std::size_t* upstream_refusals_;
  std::mt19937_64 random_;
  std::vector<block> live_;
  std::uintptr_t next_stream_ = 100;  // streams made per request
  int calls_that_waited_ = 0;
  int waits_on_exhaustion_ = 0;
};

/// Round trips on `stream` past the seals a cache makes for others that
/// missed: what it frees there last stays unsealed, the stream's own.
void leave_unsealed_block(caching_resource& cache, cudaStream_t stream) {
  for (int i = 0; i < 40; ++i) cache.deallocate_async(cache.allocate_async(4096, stream), 4096, stream);
}

TEST(NoSynchronize, CachingResourceAllocatesAndFreesWithoutWaiting) {
  host_memory_resource upstream;
  fake_ordering ordering;
  // A budget the workload presses on, and a recent peak that falls at once: evictions at misses and at frees.
  caching_resource cache(upstream,
                         caching_options{.max_cached_bytes = 64 * mebibyte, .shrink_interval = std::chrono::milliseconds(0)},
                         ordering);
  workload program(cache, ordering, 1);
  program.run_all();
  EXPECT_EQ(program.calls_that_waited(), 0);
  EXPECT_GT(cache.statistics().cross_stream_reuses, 0u) << "no block went from one stream to another";
  EXPECT_FALSE(ordering.waits.empty()) << "no stream was made to wait for another's free";
  // release() must wait where it holds blocks freed on other streams than its own.
  leave_unsealed_block(cache, fake_stream(1));
  const int before = ordering.device_synchronizations;
  cache.release();
  EXPECT_EQ(ordering.device_synchronizations, before + 1);
  EXPECT_EQ(upstream.used_bytes(), 0u);
}

TEST(NoSynchronize, CoalescingResourceAllocatesAndFreesWithoutWaiting) {
  host_memory_resource upstream;
  fake_ordering ordering;
  coalescing_resource arena(upstream, {}, ordering);
  workload program(arena, ordering, 2);
  program.run_all();
  EXPECT_EQ(program.calls_that_waited(), 0);
  const coalescing_statistics statistics = arena.statistics();
  EXPECT_GT(statistics.segments_adopted, 0u) << "no stream took over another's idle segment";
  EXPECT_GT(statistics.segment_frees, 0u) << "no outgrown segment went back";
  // release() must wait where other streams hold wholly free segments.
  EXPECT_GT(statistics.streams, 1u);
  arena.release();
  EXPECT_EQ(ordering.device_synchronizations, 1);
  EXPECT_EQ(upstream.used_bytes(), 0u);
}

TEST(NoSynchronize, CoalescingResourceGivesIdleSegmentsBackAtFreesWithoutWaiting) {
  host_memory_resource upstream;
  fake_ordering ordering;
  coalescing_resource arena(upstream, coalescing_options{.max_idle_bytes = 4 * mebibyte}, ordering);
  workload program(arena, ordering, 3);
  program.run_all();
  EXPECT_EQ(program.calls_that_waited(), 0);
  EXPECT_GT(arena.statistics().segment_frees, arena.statistics().segment_allocations / 2)
      << "idle segments stayed instead of going back at the frees";
  arena.release();
  EXPECT_EQ(upstream.used_bytes(), 0u);
}

TEST(NoSynchronize, TheDefaultStacksShapeAllocatesAndFreesWithoutWaiting) {
  host_memory_resource leaf;
  fake_ordering ordering;
  stack_shape stack(leaf, ordering);
  coalescing_resource& engine = stack.engine;
  caching_resource& front = stack.front;
  workload program(front, ordering, 4);
  program.run_all();
  EXPECT_EQ(program.calls_that_waited(), 0);
  EXPECT_GT(front.statistics().cross_stream_reuses, 0u) << "no block went from one stream to another";
  EXPECT_GT(engine.statistics().segment_frees, 0u) << "no idle segment went back at a free";
  // As device_stack::release: the front, then the engine, which must wait for other streams' segments.
  leave_unsealed_block(front, fake_stream(1));
  front.release();
  EXPECT_EQ(ordering.device_synchronizations, 1);
  engine.release();
  EXPECT_EQ(ordering.device_synchronizations, 2);
  EXPECT_EQ(leaf.used_bytes(), 0u);
}

TEST(NoSynchronize, OnlyTheLastResortBeforeOutOfMemoryWaits) {
  host_memory_resource leaf(32 * mebibyte);
  std::size_t refusals = 0;
  failure_callback_adaptor counted(leaf, [&refusals](const allocation_failure&) {
    ++refusals;
    return false;
  });
  fake_ordering ordering;
  stack_shape stack(counted, ordering);
  workload program(stack.front, ordering, 5, &refusals);
  program.random_mix(4000, 96, 23);
  program.free_all();
  EXPECT_EQ(program.calls_that_waited(), 0);
  EXPECT_GT(refusals, 0u) << "the leaf never ran out";
  EXPECT_GT(program.waits_on_exhaustion(), 0) << "exhaustion never made the stack wait for the device";
}

}  // namespace
}  // namespace cudapmr::test
