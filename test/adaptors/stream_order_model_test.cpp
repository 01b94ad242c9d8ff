// SPDX-License-Identifier: Apache-2.0
// The stream-order model checker: every cache and adaptor stack driven from
// several threads over a model of CUDA's stream order (support/stream_order_model.hpp),
// with allocations, kernels, frees on the allocating stream and on others,
// the pmr path, exhaustion, release and trim. It fails when a block is handed
// out, or given back to the leaf, before the work queued before its free is
// ordered ahead of the new owner.
//
// CUDAPMR_MODEL_OPERATIONS (per stack and seed; default 25,000) and
// CUDAPMR_MODEL_SEEDS (default 8) make a longer run; CUDAPMR_MODEL_SEED runs
// one seed. A failure names its stack and seed.
#include "support/fake_ordering.hpp"
#include "support/resource_cases.hpp"
#include "support/stream_order_model.hpp"

#include <cudapmr/adaptors/caching_resource.hpp>
#include <cudapmr/adaptors/coalescing_resource.hpp>
#include <cudapmr/adaptors/failure_callback_adaptor.hpp>
#include <cudapmr/adaptors/history_adaptor.hpp>
#include <cudapmr/adaptors/limiting_adaptor.hpp>
#include <cudapmr/adaptors/statistics_adaptor.hpp>
#include <cudapmr/adaptors/tracking_adaptor.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace cudapmr::test {
namespace {

std::uint64_t from_environment(const char* name, std::uint64_t fallback) {
  const char* value = std::getenv(name);
  return value == nullptr ? fallback : std::strtoull(value, nullptr, 10);
}

/// A stack under test: its top, and what may be released or trimmed.
struct stack {
  std::vector<std::unique_ptr<stream_ordered_resource>> layers;  // bottom first; the leaf is separate
  std::function<void()> release;
  std::function<void()> give_back_idle;  // what an idle thread does, where the stack has one
  [[nodiscard]] stream_ordered_resource& top() const { return *layers.back(); }
};

using stack_factory = std::function<stack(model_leaf&, stream_order_model&)>;

struct named_stack {
  const char* name;
  stack_factory make;
};

template <class Resource, class... Arguments>
Resource& push(stack& made, Arguments&&... arguments) {
  auto layer = std::make_unique<Resource>(std::forward<Arguments>(arguments)...);
  Resource& added = *layer;
  made.layers.push_back(std::move(layer));
  return added;
}

std::vector<named_stack> stacks() {
  const caching_options small_cache{.max_cached_block = 4 * mebibyte, .max_cached_bytes = 8 * mebibyte};
  return {
      {"caching_resource",
       [=](model_leaf& leaf, stream_order_model& model) {
         stack made;
         auto& cache = push<caching_resource>(made, leaf, small_cache, model);
         made.release = [&cache] { cache.release(); };
         return made;
       }},
      {"coalescing_resource",
       [](model_leaf& leaf, stream_order_model& model) {
         stack made;
         auto& arena = push<coalescing_resource>(made, leaf, coalescing_options{}, model);
         made.release = [&arena] { arena.release(); };
         return made;
       }},
      {"device_stack's shape: caching (following what is live) over coalescing (idle segments go back)",
       [=](model_leaf& leaf, stream_order_model& model) {
         stack made;
         auto& arena = push<coalescing_resource>(made, leaf, coalescing_options{.max_idle_bytes = 2 * mebibyte}, model);
         caching_options front = small_cache;
         front.max_cached_per_live = 4.0;
         auto& cache = push<caching_resource>(made, arena, front, model);
         made.release = [&cache, &arena] {
           cache.release();
           arena.release();
         };
         made.give_back_idle = [&arena] { static_cast<void>(arena.release_idle()); };
         return made;
       }},
      {"statistics over caching over limiting",
       [=](model_leaf& leaf, stream_order_model& model) {
         stack made;
         auto& cap = push<limiting_adaptor>(made, leaf, 24 * mebibyte);
         auto& cache = push<caching_resource>(made, cap, small_cache, model);
         push<statistics_adaptor>(made, cache);
         made.release = [&cache] { cache.release(); };
         return made;
       }},
      {"tracking over history over coalescing over a failure callback",
       [](model_leaf& leaf, stream_order_model& model) {
         stack made;
         auto& spill = push<failure_callback_adaptor>(made, leaf, [](const allocation_failure& failure) {
           return failure.attempt < 2;  // one retry, as a spilling callback would after freeing
         });
         auto& arena = push<coalescing_resource>(made, spill, coalescing_options{}, model);
         push<history_adaptor>(made, arena, history_options{.capacity = 1024});
         push<tracking_adaptor>(made, made.top());
         made.release = [&arena] { arena.release(); };
         return made;
       }},
  };
}

struct live_block {
  void* pointer;
  std::size_t bytes;
  stream_ref stream;  // where it was allocated and used
};

/// One run: `threads` threads, each on two streams of its own, `operations` in all.
std::vector<std::string> run_model(const named_stack& under_test, std::uint64_t seed, std::size_t operations) {
  constexpr int threads = 4;
  const cudaStream_t bound = fake_stream(1000);
  stream_order_model model(seed);
  model_leaf leaf(model, 48 * mebibyte, bound);
  std::vector<std::string> failures;
  {
    stack made = under_test.make(leaf, model);
    stream_ordered_resource& top = made.top();
    std::mutex live_mutex;
    std::vector<live_block> live;
    std::atomic<bool> bound_handed_out{false};
    std::vector<std::thread> workers;
    for (int thread = 0; thread < threads; ++thread) {
      workers.emplace_back([&, thread] {
        std::mt19937_64 random(seed * 1000003u + static_cast<std::uint64_t>(thread));
        const auto pick = [&](std::size_t count) { return std::uniform_int_distribution<std::size_t>(0, count - 1)(random); };
        const stream_ref own[2] = {fake_stream(static_cast<std::uintptr_t>(10 + 2 * thread)),
                                   fake_stream(static_cast<std::uintptr_t>(11 + 2 * thread))};
        const auto any_stream = [&]() -> stream_ref {
          return fake_stream(static_cast<std::uintptr_t>(10 + pick(2 * threads)));
        };
        const auto free_one = [&] {
          live_block block{};
          {
            const std::lock_guard lock(live_mutex);
            if (live.empty()) return;
            const std::size_t index = pick(live.size());
            block = live[index];
            live[index] = live.back();
            live.pop_back();
          }
          stream_ref freeing = block.stream;
          if (pick(3) == 0) {  // freed on another stream, which the program orders after the block's work
            freeing = any_stream();
            model.order_after(freeing, block.stream);
          }
          model.queue_work(freeing);
          model.note_free(block.pointer, block.bytes, freeing);
          top.deallocate_async(block.pointer, block.bytes, freeing);
        };
        for (std::size_t step = 0; step < operations / threads; ++step) {
          const std::size_t choice = pick(100);
          if (choice < 40) {
            const stream_ref stream = own[pick(2)];
            // 256 B to 4 MiB, most of them small.
            const std::size_t bytes = (std::size_t{256} << pick(pick(3) == 0 ? 15 : 8)) + pick(256);
            try {
              void* p = top.allocate_async(bytes, stream);
              model.note_handed_out(p, bytes, stream, under_test.name);
              model.queue_work(stream);
              const std::lock_guard lock(live_mutex);
              live.push_back({p, bytes, stream});
            } catch (const out_of_memory&) {
              free_one();
            }
          } else if (choice < 78) {
            free_one();
          } else if (choice < 86) {
            model.progress(any_stream());
          } else if (choice < 93) {
            // The pmr path: on the bound stream, synchronized, used by the host.
            const std::size_t bytes = std::size_t{512} << pick(6);
            try {
              void* p = top.allocate(bytes);
              model.note_handed_out(p, bytes, bound, under_test.name);
              model.synchronize(bound);
              model.note_free(p, bytes, bound);
              top.deallocate(p, bytes);
            } catch (const out_of_memory&) {
              free_one();
            }
          } else if (choice < 96) {
            // Once handed out, the bound stream carries the program's work too.
            if (!bound_handed_out.exchange(true)) static_cast<void>(top.bound_stream());
            model.queue_work(bound);
          } else if (choice < 98) {
            model.progress(bound);
          } else if (choice == 98) {
            made.release();
          } else if (made.give_back_idle && pick(2) == 0) {
            made.give_back_idle();
          } else {
            top.trim(own[pick(2)]);
          }
        }
      });
    }
    for (std::thread& worker : workers) worker.join();
    for (const live_block& block : live) {
      model.note_free(block.pointer, block.bytes, block.stream);
      top.deallocate_async(block.pointer, block.bytes, block.stream);
    }
    made.release();
    while (!made.layers.empty()) made.layers.pop_back();  // top first
  }
  for (std::string& violation : model.violations())
    failures.push_back(fmt::format("{}, seed {}: {}", under_test.name, seed, violation));
  if (leaf.used_bytes() != 0)
    failures.push_back(fmt::format("{}, seed {}: {} bytes never went back to the leaf", under_test.name, seed,
                                   leaf.used_bytes()));
  return failures;
}

TEST(StreamOrderModel, NoStackHandsOutABlockBeforeTheWorkBeforeItsFreeIsOrdered) {
  const std::uint64_t operations = from_environment("CUDAPMR_MODEL_OPERATIONS", 25'000);
  const std::uint64_t seeds = from_environment("CUDAPMR_MODEL_SEEDS", 8);
  const std::uint64_t only_seed = from_environment("CUDAPMR_MODEL_SEED", 0);
  std::uint64_t total = 0;
  for (const named_stack& under_test : stacks()) {
    for (std::uint64_t seed = only_seed != 0 ? only_seed : 1; seed <= (only_seed != 0 ? only_seed : seeds); ++seed) {
      const std::vector<std::string> failures = run_model(under_test, seed, operations);
      total += operations;
      for (const std::string& failure : failures) ADD_FAILURE() << failure;
      if (!failures.empty()) return;  // the first failing seed is the one to rerun
    }
  }
  RecordProperty("operations", std::to_string(total));
  std::printf("stream-order model: %llu operations over %zu stacks, no violation\n",
              static_cast<unsigned long long>(total), stacks().size());
}

}  // namespace
}  // namespace cudapmr::test
