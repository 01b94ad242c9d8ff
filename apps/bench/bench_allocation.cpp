// SPDX-License-Identifier: Apache-2.0
// Allocation benchmarks: every peer allocator and every cudapmr resource,
// side by side in one run, at 256 B, 64 KiB, 1 MiB and on a random mix;
// thread scaling; streams that allocate and launch kernels at once.
//
// Names: alloc/<memory kind>/<workload>/<entrant>; entrants named "peer:..."
// are the field, "cudapmr:..." are ours (bench_main.cpp prints the ratios).
#include "peer_allocators.hpp"
#include "stack_variants.hpp"
#ifdef CUDAPMR_BENCH_HAVE_RMM
#include "rmm_peers.hpp"
#endif

#include <cudapmr/adaptors/caching_resource.hpp>
#include <cudapmr/adaptors/coalescing_resource.hpp>
#include <cudapmr/device_stack.hpp>
#include <cudapmr/virtual_memory_resource.hpp>
#include <cudapmr/adaptors/history_adaptor.hpp>
#include <cudapmr/cudapmr.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <mutex>
#include <memory>
#include <memory_resource>
#include <random>
#include <string>
#include <vector>

namespace bench {
namespace {

constexpr std::size_t kibibyte = 1024;
constexpr std::size_t mebibyte = 1024 * kibibyte;

void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) throw cudapmr::cuda_error(status, call);
}

// ---- the entrants -------------------------------------------------------------

/// A synchronous CUDA allocator: cudaMalloc, cudaMallocHost or cudaMallocManaged
/// with its matching free; streams play no part.
class synchronous_cuda_allocator final : public allocator_under_test {
 public:
  using allocate_function = cudaError_t (*)(void**, std::size_t);
  using free_function = cudaError_t (*)(void*);
  synchronous_cuda_allocator(allocate_function allocate_call, free_function free_call) noexcept
      : allocate_(allocate_call), free_(free_call) {}
  void* allocate(std::size_t bytes, cudaStream_t) override {
    void* p = nullptr;
    check(allocate_(&p, bytes), "a synchronous CUDA allocation");
    return p;
  }
  void deallocate(void* p, std::size_t, cudaStream_t) override { check(free_(p), "a synchronous CUDA free"); }

 private:
  allocate_function allocate_;
  free_function free_;
};

cudaError_t malloc_device(void** p, std::size_t bytes) { return cudaMalloc(p, bytes); }
cudaError_t malloc_host(void** p, std::size_t bytes) { return cudaMallocHost(p, bytes); }
cudaError_t malloc_managed(void** p, std::size_t bytes) { return cudaMallocManaged(p, bytes); }
cudaError_t free_device(void* p) { return cudaFree(p); }
cudaError_t free_host(void* p) { return cudaFreeHost(p); }

/// The host reference: std::pmr's own pool over the heap.
class pmr_unsynchronized_pool final : public allocator_under_test {
 public:
  void* allocate(std::size_t bytes, cudaStream_t) override { return pool_.allocate(bytes, 256); }
  void deallocate(void* p, std::size_t bytes, cudaStream_t) override { pool_.deallocate(p, bytes, 256); }

 private:
  std::pmr::unsynchronized_pool_resource pool_{std::pmr::pool_options{0, 4 * mebibyte}};
};

/// A cudapmr resource, through its stream-ordered path or its pmr path.
class cudapmr_resource final : public allocator_under_test {
 public:
  cudapmr_resource(std::shared_ptr<cudapmr::stream_ordered_resource> resource, bool pmr_path,
                   std::shared_ptr<cudapmr::stream_ordered_resource> upstream = nullptr)
      : upstream_(std::move(upstream)), resource_(std::move(resource)), pmr_path_(pmr_path) {}
  void* allocate(std::size_t bytes, cudaStream_t stream) override {
    return pmr_path_ ? resource_->allocate(bytes) : resource_->allocate_async(bytes, stream);
  }
  void deallocate(void* p, std::size_t bytes, cudaStream_t stream) override {
    if (pmr_path_) resource_->deallocate(p, bytes);
    else resource_->deallocate_async(p, bytes, stream);
  }
  /// The caching front where there is one (a caching_resource, a device_stack's front), else null.
  [[nodiscard]] cudapmr::caching_resource* cache() const noexcept {
    if (auto* stack = dynamic_cast<cudapmr::device_stack*>(resource_.get())) return &stack->front();
    return dynamic_cast<cudapmr::caching_resource*>(resource_.get());
  }

 private:
  std::shared_ptr<cudapmr::stream_ordered_resource> upstream_;  // outlives resource_
  std::shared_ptr<cudapmr::stream_ordered_resource> resource_;
  bool pmr_path_;
};

cudaMemPool_t default_pool(cudaMemLocation location, cudaMemAllocationType type) {
  cudaMemPool_t pool = nullptr;
  check(cudaMemGetDefaultMemPool(&pool, &location, type), "cudaMemGetDefaultMemPool");
  if (location.type == cudaMemLocationTypeHost) {
    // Pinned memory is only useful once kernels can reach it: the peer gets
    // the same device access that cudapmr's pinned resource grants.
    cudaMemAccessDesc access{};
    access.location = {cudaMemLocationTypeDevice, 0};
    access.flags = cudaMemAccessFlagsProtReadWrite;
    check(cudaMemPoolSetAccess(pool, &access, 1), "cudaMemPoolSetAccess");
  }
  return pool;
}

struct entrant {
  std::string kind;  // device, pinned, managed, host
  std::string name;  // peer:... or cudapmr:...
  bool slow;         // a call costs micro- to milliseconds: fewer mix operations
  std::function<std::unique_ptr<allocator_under_test>()> make;
};

std::unique_ptr<allocator_under_test> ours(std::shared_ptr<cudapmr::stream_ordered_resource> resource, bool pmr_path) {
  return std::make_unique<cudapmr_resource>(std::move(resource), pmr_path);
}

/// A cache the process owns and never destroys, shared without ownership;
/// what it cached goes back to its pool when the entrant is done, so that later
/// entrants over the same default pool find it as it was.
std::shared_ptr<cudapmr::stream_ordered_resource> process_default(cudapmr::caching_resource& cache) {
  return {&cache, [](cudapmr::stream_ordered_resource* done) {
            try {
              static_cast<cudapmr::caching_resource*>(done)->release();
            } catch (...) {  // a deleter never throws: the pool keeps the blocks, the bench goes on
            }
          }};
}

std::unique_ptr<allocator_under_test> ours_caching(std::shared_ptr<cudapmr::stream_ordered_resource> upstream,
                                                   bool pmr_path, cudapmr::caching_options options = {}) {
  auto cache = std::make_shared<cudapmr::caching_resource>(*upstream, options);
  return std::make_unique<cudapmr_resource>(std::move(cache), pmr_path, std::move(upstream));
}

std::unique_ptr<allocator_under_test> ours_coalescing(std::shared_ptr<cudapmr::stream_ordered_resource> upstream) {
  auto arena = std::make_shared<cudapmr::coalescing_resource>(*upstream);
  return std::make_unique<cudapmr_resource>(std::move(arena), false, std::move(upstream));
}

/// A history_adaptor (call stacks off) over a caching_resource over `upstream`:
/// beside the cache alone, what recording every event costs.
std::unique_ptr<allocator_under_test> ours_history_over_caching(
    std::shared_ptr<cudapmr::stream_ordered_resource> upstream) {
  struct layers {
    std::shared_ptr<cudapmr::stream_ordered_resource> upstream;
    cudapmr::caching_resource cache{*upstream};
    cudapmr::history_adaptor history{cache};
  };
  auto stack = std::make_shared<layers>(std::move(upstream));
  std::shared_ptr<cudapmr::stream_ordered_resource> top(stack, &stack->history);
  return std::make_unique<cudapmr_resource>(std::move(top), false);
}

std::vector<entrant> entrants() {
  cudaMemLocation device0{cudaMemLocationTypeDevice, 0};
  cudaMemLocation host{cudaMemLocationTypeHost, 0};
  cudaMemLocation nowhere{cudaMemLocationTypeNone, 0};
  auto device_pool = [] { return std::make_shared<cudapmr::device_memory_resource>(0); };
  auto pinned_pool = [] { return std::make_shared<cudapmr::pinned_memory_resource>(); };
  auto managed_pool = [] { return std::make_shared<cudapmr::managed_memory_resource>(); };
  std::vector<entrant> all{
      {"device", "peer:cudaMalloc", true, [] { return std::make_unique<synchronous_cuda_allocator>(malloc_device, free_device); }},
      {"device", "peer:cudaMallocAsync", false,
       [=] { return make_cuda_pool_allocator(default_pool(device0, cudaMemAllocationTypePinned)); }},
      {"device", "peer:cub::CachingDeviceAllocator", false, [] { return make_cub_caching_allocator(false); }},
      {"device", "peer:cub::CachingDeviceAllocator(tuned)", false, [] { return make_cub_caching_allocator(true); }},
      {"device", "cudapmr:device_memory_resource", false, [=] { return ours(device_pool(), false); }},
      {"device", "cudapmr:caching_resource(device)", false, [=] { return ours_caching(device_pool(), false); }},
      {"device", "cudapmr:caching_resource(device, no capture check)", false,
       [=] { return ours_caching(device_pool(), false, {.check_capture = false}); }},
      {"device", "cudapmr:history_adaptor over caching_resource(device)", false,
       [=] { return ours_history_over_caching(device_pool()); }},
      {"device", "cudapmr:caching_resource(device_malloc)", false,
       [] { return ours_caching(std::make_shared<cudapmr::device_malloc_resource>(0), false); }},
      {"device", "cudapmr:coalescing_resource(device_malloc)", false,
       [] { return ours_coalescing(std::make_shared<cudapmr::device_malloc_resource>(0)); }},
      {"device", "cudapmr:device_stack", false,
       [] { return ours(std::make_shared<cudapmr::device_stack>(0), false); }},
      // What giving back at frees costs in time (the memory bench has the same row, for what it saves).
      {"device", "cudapmr:device_stack (engine keeps idle segments)", false,
       [] { return ours(std::make_shared<cudapmr::device_stack>(0, cudapmr::bench::engine_keeps_idle_segments()), false); }},
      // What the front's hand-back before large requests costs in time (the memory bench: what it saves).
      {"device", "cudapmr:device_stack (front keeps its blocks at large requests)", false,
       [] { return ours(std::make_shared<cudapmr::device_stack>(0, cudapmr::bench::front_keeps_blocks_at_large_requests()), false); }},
      // What offering a stream's blocks past 4 MiB costs in events (the memory bench: what many streams then hold).
      {"device", "cudapmr:device_stack (front offers past 4 MiB a stream)", false,
       [] { return ours(std::make_shared<cudapmr::device_stack>(0, cudapmr::bench::front_offers_past_4_mib_a_stream()), false); }},
      {"device", "cudapmr:coalescing_resource(virtual_memory)", false,
       [] { return ours_coalescing(std::make_shared<cudapmr::virtual_memory_resource>(0)); }},
      {"pinned", "peer:cudaMallocHost", true, [] { return std::make_unique<synchronous_cuda_allocator>(malloc_host, free_host); }},
      {"pinned", "peer:pinned pool (cudaMallocFromPoolAsync)", false,
       [=] { return make_cuda_pool_allocator(default_pool(host, cudaMemAllocationTypePinned)); }},
      {"pinned", "cudapmr:pinned_memory_resource(pmr)", true, [=] { return ours(pinned_pool(), true); }},
      {"pinned", "cudapmr:default_pinned_resource(pmr)", false,
       [] { return ours(process_default(cudapmr::default_pinned_resource()), true); }},
      {"pinned", "cudapmr:pinned_memory_resource(async)", false, [=] { return ours(pinned_pool(), false); }},
      {"pinned", "cudapmr:caching_resource(pinned)", false, [=] { return ours_caching(pinned_pool(), false); }},
      {"managed", "peer:cudaMallocManaged", true, [] { return std::make_unique<synchronous_cuda_allocator>(malloc_managed, free_device); }},
      {"managed", "peer:managed pool (cudaMallocFromPoolAsync)", false,
       [=] { return make_cuda_pool_allocator(default_pool(nowhere, cudaMemAllocationTypeManaged)); }},
      {"managed", "cudapmr:managed_memory_resource(pmr)", true, [=] { return ours(managed_pool(), true); }},
      {"managed", "cudapmr:default_managed_resource(pmr)", false,
       [] { return ours(process_default(cudapmr::default_managed_resource()), true); }},
      {"managed", "cudapmr:managed_memory_resource(async)", false, [=] { return ours(managed_pool(), false); }},
      {"managed", "cudapmr:caching_resource(managed)", false, [=] { return ours_caching(managed_pool(), false); }},
      {"host", "peer:std::pmr::unsynchronized_pool_resource", false,
       [] { return std::make_unique<pmr_unsynchronized_pool>(); }},
  };
#ifdef CUDAPMR_BENCH_HAVE_RMM
  for (named_peer& peer : rmm_peers()) all.push_back({"device", peer.name, false, peer.make});
#endif
  return all;
}

// ---- the workloads -------------------------------------------------------------

cudaStream_t new_stream() {
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  return stream;
}

/// The timed loop of the pair workloads: one allocate + free per iteration.
void time_pairs(benchmark::State& state, allocator_under_test& allocator, std::size_t bytes, cudaStream_t stream) {
  for (auto _ : state) {
    void* p = allocator.allocate(bytes, stream);
    benchmark::DoNotOptimize(p);
    allocator.deallocate(p, bytes, stream);
  }
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  state.SetItemsProcessed(state.iterations());
}

/// One allocate + free of `bytes` per iteration, on one non-blocking stream.
void pairs(benchmark::State& state, const entrant& who, std::size_t bytes) {
  const cudaStream_t stream = new_stream();
  {
    const auto allocator = who.make();
    for (int i = 0; i < 100; ++i) allocator->deallocate(allocator->allocate(bytes, stream), bytes, stream);
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    time_pairs(state, *allocator, bytes, stream);
  }
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

/// The random mix: up to 1,000 live allocations of 256 B .. 4 MiB (uniform,
/// mt19937_64 seed 42), each step allocating or freeing a random live one
/// with equal odds; the same script for every entrant. With a `large_share`,
/// that share of the requests asks for 4 .. 32 MiB instead: past the size a
/// front caches, among small ones.
struct mix_step {
  bool allocate;
  std::size_t bytes;
  std::size_t victim;  // taken modulo the live count
};

std::vector<mix_step> mix_script(std::size_t steps, double large_share) {
  std::mt19937_64 random(42);
  std::uniform_int_distribution<std::size_t> size(256, 4 * mebibyte);
  std::uniform_int_distribution<std::size_t> large_size(4 * mebibyte + 1, 32 * mebibyte);
  std::bernoulli_distribution coin(0.5);
  std::bernoulli_distribution large(large_share);
  std::vector<mix_step> script;
  script.reserve(steps);
  for (std::size_t i = 0; i < steps; ++i) {
    const bool allocate = coin(random);
    const std::size_t bytes = large_share > 0 && large(random) ? large_size(random) : size(random);
    script.push_back({allocate, bytes, random()});
  }
  return script;
}

void mix(benchmark::State& state, const entrant& who, double large_share) {
  const std::size_t steps = who.slow ? 2000 : 100000;
  const std::vector<mix_step> script = mix_script(steps, large_share);
  const cudaStream_t stream = new_stream();
  {
    const auto allocator = who.make();
    std::vector<std::pair<void*, std::size_t>> live;
    live.reserve(1000);
    auto free_all = [&] {
      for (const auto& [p, bytes] : live) allocator->deallocate(p, bytes, stream);
      live.clear();
    };
    for (auto _ : state) {
      for (const mix_step& step : script) {
        if ((step.allocate || live.empty()) && live.size() < 1000) {
          live.emplace_back(allocator->allocate(step.bytes, stream), step.bytes);
        } else {
          const std::size_t index = step.victim % live.size();
          allocator->deallocate(live[index].first, live[index].second, stream);
          live[index] = live.back();
          live.pop_back();
        }
      }
      state.PauseTiming();
      free_all();
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      state.ResumeTiming();
    }
  }
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  state.SetItemsProcessed(state.iterations() * static_cast<benchmark::IterationCount>(script.size()));
}

/// Many threads, each on its own stream, 64 KiB pairs; one allocator shared.
/// A cache's work beside the pairs is counted by the first thread, over the
/// run: `seals` (events recorded at frees), `misses`, `cross` (blocks reused
/// on another stream), each per 1,000 pairs of all threads.
void threads(benchmark::State& state, const std::shared_ptr<allocator_under_test>& allocator) {
  const cudaStream_t stream = new_stream();
  const auto* ours = dynamic_cast<cudapmr_resource*>(allocator.get());
  const cudapmr::caching_resource* cache = ours != nullptr && state.thread_index() == 0 ? ours->cache() : nullptr;
  const cudapmr::cache_statistics before = cache != nullptr ? cache->statistics() : cudapmr::cache_statistics{};
  time_pairs(state, *allocator, 64 * kibibyte, stream);
  if (cache != nullptr) {
    const cudapmr::cache_statistics after = cache->statistics();
    // Each thread runs as many iterations as the first: all pairs are its count times the threads.
    const double per_thousand = 1000.0 / static_cast<double>(state.iterations() * state.threads());
    state.counters["seals"] = static_cast<double>(after.events_recorded - before.events_recorded) * per_thousand;
    state.counters["misses"] = static_cast<double>(after.misses - before.misses) * per_thousand;
    state.counters["cross"] = static_cast<double>(after.cross_stream_reuses - before.cross_stream_reuses) * per_thousand;
  }
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

/// Each thread on its own stream allocates 1 MiB, launches a kernel over it
/// and frees it: an allocator that synchronizes serialises the streams.
void streams(benchmark::State& state, const std::shared_ptr<allocator_under_test>& allocator) {
  const cudaStream_t stream = new_stream();
  constexpr std::size_t bytes = mebibyte;
  for (auto _ : state) {
    void* p = allocator->allocate(bytes, stream);
    touch(p, bytes, stream);
    allocator->deallocate(p, bytes, stream);
  }
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  state.SetItemsProcessed(state.iterations());
}

/// The thin resource (device_memory_resource) against the raw calls it makes,
/// interleaved so that the machine's drift hits both alike: each round times
/// 1,000 raw cudaMallocFromPoolAsync + cudaFreeAsync pairs on the device's
/// default pool and 1,000 device_memory_resource pairs over the same pool,
/// in turns first. Counters: the median ns per pair of each, and the median of
/// the rounds' ratios.
void thin_against_raw(benchmark::State& state, std::size_t bytes) {
  constexpr int pairs_per_round = 1000;
  const cudaStream_t stream = new_stream();
  const cudaMemPool_t pool = default_pool({cudaMemLocationTypeDevice, 0}, cudaMemAllocationTypePinned);
  cudapmr::device_memory_resource thin(0);  // over that same pool
  using clock = std::chrono::steady_clock;
  const auto per_pair = [](clock::duration elapsed) {
    return std::chrono::duration<double, std::nano>(elapsed).count() / pairs_per_round;
  };
  std::vector<double> raw_ns;
  std::vector<double> thin_ns;
  std::vector<double> ratios;
  for (int i = 0; i < 100; ++i) thin.deallocate_async(thin.allocate_async(bytes, stream), bytes, stream);
  const auto time_raw = [&] {
    const auto start = clock::now();
    for (int i = 0; i < pairs_per_round; ++i) {
      void* p = nullptr;
      check(cudaMallocFromPoolAsync(&p, bytes, pool, stream), "cudaMallocFromPoolAsync");
      benchmark::DoNotOptimize(p);
      check(cudaFreeAsync(p, stream), "cudaFreeAsync");
    }
    return per_pair(clock::now() - start);
  };
  const auto time_thin = [&] {
    const auto start = clock::now();
    for (int i = 0; i < pairs_per_round; ++i) {
      void* p = thin.allocate_async(bytes, stream);
      benchmark::DoNotOptimize(p);
      thin.deallocate_async(p, bytes, stream);
    }
    return per_pair(clock::now() - start);
  };
  bool raw_first = true;  // alternates, so that neither side always follows the other
  for (auto _ : state) {
    const double first = raw_first ? time_raw() : time_thin();
    const double second = raw_first ? time_thin() : time_raw();
    raw_ns.push_back(raw_first ? first : second);
    thin_ns.push_back(raw_first ? second : first);
    ratios.push_back(thin_ns.back() / raw_ns.back());
    raw_first = !raw_first;
  }
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  const auto median = [](std::vector<double>& values) {
    std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2), values.end());
    return values[values.size() / 2];
  };
  state.counters["raw_ns"] = median(raw_ns);
  state.counters["thin_ns"] = median(thin_ns);
  state.counters["thin_over_raw"] = median(ratios);
}

const char* size_name(std::size_t bytes) {
  return bytes == 256 ? "256B" : bytes == 64 * kibibyte ? "64KiB" : "1MiB";
}

}  // namespace

void register_allocation_benchmarks() {
  static const std::vector<entrant> all = entrants();  // must outlive the benchmark runs
  for (const entrant& who : all) {
    for (const std::size_t bytes : {std::size_t{256}, 64 * kibibyte, mebibyte}) {
      benchmark::RegisterBenchmark(("alloc/" + who.kind + "/" + size_name(bytes) + "/" + who.name).c_str(),
                                   [&who, bytes](benchmark::State& state) { pairs(state, who, bytes); })
          ->MinTime(0.2)
          ->UseRealTime();
    }
    benchmark::RegisterBenchmark(("alloc/" + who.kind + "/mix/" + who.name).c_str(),
                                 [&who](benchmark::State& state) { mix(state, who, 0.0); })
        ->MinTime(0.2)
        ->UseRealTime();
    if (who.kind == "device")
      benchmark::RegisterBenchmark(("alloc/device/mix_to_32MiB/" + who.name).c_str(),
                                   [&who](benchmark::State& state) { mix(state, who, 0.1); })
          ->MinTime(0.2)
          ->UseRealTime();
  }
  for (const std::size_t bytes : {std::size_t{256}, 64 * kibibyte, mebibyte}) {
    benchmark::RegisterBenchmark((std::string("alloc/device/thin_against_raw/") + size_name(bytes)).c_str(),
                                 [bytes](benchmark::State& state) { thin_against_raw(state, bytes); })
        ->Iterations(200)
        ->UseRealTime();
  }
  // Shared allocators for the multi-threaded cases, created on first use.
  for (const entrant& who : all) {
    if (who.kind != "device" || who.slow) continue;
    auto shared = std::make_shared<std::shared_ptr<allocator_under_test>>();
    auto get = [shared, &who] {
      static std::mutex mutex;
      const std::lock_guard lock(mutex);
      if (!*shared) *shared = who.make();
      return *shared;
    };
    benchmark::RegisterBenchmark(("alloc/device/threads/" + who.name).c_str(),
                                 [get](benchmark::State& state) { threads(state, get()); })
        ->ThreadRange(1, 16)
        ->MinTime(0.2)
        ->UseRealTime();
  }
  for (const entrant& who : all) {
    if (who.kind != "device") continue;
    auto shared = std::make_shared<std::shared_ptr<allocator_under_test>>();
    auto get = [shared, &who] {
      static std::mutex mutex;
      const std::lock_guard lock(mutex);
      if (!*shared) *shared = who.make();
      return *shared;
    };
    benchmark::RegisterBenchmark(("alloc/device/streams/" + who.name).c_str(),
                                 [get](benchmark::State& state) { streams(state, get()); })
        ->Threads(8)
        ->MinTime(0.2)
        ->UseRealTime();
  }
}

}  // namespace bench
