// SPDX-License-Identifier: Apache-2.0
// cudapmr_memory_bench: time and memory side by side. Each workload runs over
// each device allocator, made fresh for every repetition; the device memory it
// lost (cudaMemGetInfo before and after, the allocator still alive, everything
// freed) is divided by the live peak (the most bytes the workload held at
// once). Medians of the repetitions; a markdown table last, and the device
// memory over time of one workload per allocator as CSV for the plot.
// With `--peak`, each workload runs once more over each allocator, untimed,
// reading the device memory in use after every allocation: the most it held
// while the workload ran, over the live peak (the footprint a program sees).
//
// The trace workload replays a logging_adaptor log (`--trace FILE`, or by
// default one recorded at start from replay's 16-thread workload) with a
// thread per logged thread and a stream per logged stream.
//
//   cudapmr_memory_bench [--repetitions N] [--timeline memory_timeline.csv] [--trace FILE] [--only WORKLOAD]
//                        [--with ALLOCATOR]... [--peak] [--version]
#include "command_line.hpp"
#include "peer_allocators.hpp"
#include "stack_variants.hpp"
#ifdef CUDAPMR_BENCH_HAVE_RMM
#include "rmm_peers.hpp"
#endif

#include "replay.hpp"

#include <cudapmr/adaptors/caching_resource.hpp>
#include <cudapmr/adaptors/coalescing_resource.hpp>
#include <cudapmr/device_stack.hpp>
#include <cudapmr/virtual_memory_resource.hpp>
#include <cudapmr/adaptors/logging_adaptor.hpp>
#include <cudapmr/cudapmr.hpp>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace bench {
namespace {

constexpr std::size_t mebibyte = std::size_t{1} << 20;

void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) throw cudapmr::cuda_error(status, call);
}

std::size_t device_used() {
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  check(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo");
  return total - free_bytes;
}

cudaStream_t new_stream() {
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  return stream;
}

// ---- entrants ---------------------------------------------------------------------

/// cudaMallocFromPoolAsync over a pool of its own that keeps its memory, as
/// RMM's cuda_async does by default.
std::unique_ptr<allocator_under_test> own_cuda_pool() {
  cudaMemPoolProps properties{};
  properties.allocType = cudaMemAllocationTypePinned;
  properties.location = {cudaMemLocationTypeDevice, 0};
  cudaMemPool_t pool = nullptr;
  check(cudaMemPoolCreate(&pool, &properties), "cudaMemPoolCreate");
  return make_cuda_pool_allocator(pool, true);
}

/// The adaptor a cudapmr stack puts over its leaf.
using front_maker = std::unique_ptr<cudapmr::stream_ordered_resource> (*)(cudapmr::stream_ordered_resource&);
std::unique_ptr<cudapmr::stream_ordered_resource> caching_front(cudapmr::stream_ordered_resource& leaf) {
  return std::make_unique<cudapmr::caching_resource>(leaf);
}
std::unique_ptr<cudapmr::stream_ordered_resource> coalescing_front(cudapmr::stream_ordered_resource& leaf) {
  return std::make_unique<cudapmr::coalescing_resource>(leaf);
}

/// A cudapmr stack: a leaf (an owned device pool, or cudaMalloc), with or without an adaptor over it.
class cudapmr_stack final : public allocator_under_test {
 public:
  cudapmr_stack(std::unique_ptr<cudapmr::stream_ordered_resource> leaf, front_maker front) : leaf_(std::move(leaf)) {
    if (front != nullptr) front_ = front(*leaf_);
  }
  void* allocate(std::size_t bytes, cudaStream_t stream) override { return top().allocate_async(bytes, stream); }
  void deallocate(void* p, std::size_t bytes, cudaStream_t stream) override { top().deallocate_async(p, bytes, stream); }

 private:
  cudapmr::stream_ordered_resource& top() { return front_ ? *front_ : *leaf_; }
  std::unique_ptr<cudapmr::stream_ordered_resource> leaf_;
  std::unique_ptr<cudapmr::stream_ordered_resource> front_;  // destroyed first
};

std::unique_ptr<allocator_under_test> over_pool(front_maker front, std::size_t release_threshold) {
  return std::make_unique<cudapmr_stack>(
      std::make_unique<cudapmr::device_memory_resource>(0, cudapmr::device_pool_options{.release_threshold = release_threshold}),
      front);
}

std::unique_ptr<allocator_under_test> over_malloc(front_maker front) {
  return std::make_unique<cudapmr_stack>(std::make_unique<cudapmr::device_malloc_resource>(0), front);
}

struct entrant {
  std::string name;
  std::function<std::unique_ptr<allocator_under_test>()> make;
};

std::vector<entrant> entrants() {
  std::vector<entrant> all{
      {"peer:cudaMallocAsync (own pool, keeps all)", own_cuda_pool},
      {"peer:cub::CachingDeviceAllocator (tuned)", [] { return make_cub_caching_allocator(true); }},
  };
#ifdef CUDAPMR_BENCH_HAVE_RMM
  for (named_peer& peer : rmm_peers()) all.push_back({peer.name, peer.make});
#endif
  all.push_back({"cudapmr:device_memory_resource", [] { return over_pool(nullptr, cudapmr::keep_all_memory); }});
  all.push_back({"cudapmr:caching_resource (pool keeps all)", [] { return over_pool(caching_front, cudapmr::keep_all_memory); }});
  all.push_back({"cudapmr:caching_resource (pool releases at sync)", [] { return over_pool(caching_front, 0); }});
  all.push_back({"cudapmr:caching_resource (over device_malloc_resource)", [] { return over_malloc(caching_front); }});
  all.push_back({"cudapmr:coalescing_resource (over device_malloc_resource)", [] { return over_malloc(coalescing_front); }});
  all.push_back({"cudapmr:coalescing_resource (over virtual_memory_resource)",
                 [] { return std::make_unique<cudapmr_stack>(std::make_unique<cudapmr::virtual_memory_resource>(0), coalescing_front); }});
  all.push_back({"cudapmr:device_stack", [] { return std::make_unique<cudapmr_stack>(std::make_unique<cudapmr::device_stack>(0), nullptr); }});
  // What giving back at frees saves in memory, against the time it costs (the allocation bench has the same row).
  all.push_back({"cudapmr:device_stack (engine keeps idle segments)", [] {
                   return std::make_unique<cudapmr_stack>(
                       std::make_unique<cudapmr::device_stack>(0, cudapmr::bench::engine_keeps_idle_segments()), nullptr);
                 }});
  // What the front's hand-back before large requests saves in memory (the allocation bench: what it costs).
  all.push_back({"cudapmr:device_stack (front keeps its blocks at large requests)", [] {
                   return std::make_unique<cudapmr_stack>(
                       std::make_unique<cudapmr::device_stack>(0, cudapmr::bench::front_keeps_blocks_at_large_requests()),
                       nullptr);
                 }});
  // What many streams hold when the front offers their blocks early (the allocation bench: what the events cost).
  all.push_back({"cudapmr:device_stack (front offers past 4 MiB a stream)", [] {
                   return std::make_unique<cudapmr_stack>(
                       std::make_unique<cudapmr::device_stack>(0, cudapmr::bench::front_offers_past_4_mib_a_stream()),
                       nullptr);
                 }});
  return all;
}

// ---- workloads ---------------------------------------------------------------------

/// What a workload reports: operations done, the live peak, and (optionally)
/// device memory in use every so often.
struct workload_context {
  allocator_under_test& allocator;
  std::size_t live = 0;
  std::size_t live_peak = 0;
  std::size_t operations = 0;
  std::vector<std::pair<std::size_t, std::size_t>>* timeline = nullptr;  // (operation, device bytes used)
  std::size_t sample_every = 0;

  void* allocate(std::size_t bytes, cudaStream_t stream) {
    void* p = allocator.allocate(bytes, stream);
    live += bytes;
    live_peak = std::max(live_peak, live);
    step();
    return p;
  }
  void deallocate(void* p, std::size_t bytes, cudaStream_t stream) {
    allocator.deallocate(p, bytes, stream);
    live -= bytes;
    step();
  }
  void step() {
    ++operations;
    if (timeline != nullptr && operations % sample_every == 0) timeline->emplace_back(operations, device_used());
  }
};

using workload = std::function<void(workload_context&)>;

void pairs(workload_context& context, std::size_t bytes) {
  const cudaStream_t stream = new_stream();
  for (int i = 0; i < 100000; ++i) context.deallocate(context.allocate(bytes, stream), bytes, stream);
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

/// Allocate 1 MiB on A and write it there; B reads it after an event and frees it.
void cross_stream(workload_context& context) {
  const cudaStream_t producer = new_stream();
  const cudaStream_t consumer = new_stream();
  cudaEvent_t produced = nullptr;
  check(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  for (int i = 0; i < 20000; ++i) {
    void* p = context.allocate(mebibyte, producer);
    touch(p, mebibyte, producer);
    check(cudaEventRecord(produced, producer), "cudaEventRecord");
    check(cudaStreamWaitEvent(consumer, produced, 0), "cudaStreamWaitEvent");
    touch(p, mebibyte, consumer);
    context.deallocate(p, mebibyte, consumer);
  }
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  check(cudaEventDestroy(produced), "cudaEventDestroy");
  check(cudaStreamDestroy(producer), "cudaStreamDestroy");
  check(cudaStreamDestroy(consumer), "cudaStreamDestroy");
}

/// One live block growing from 1 MiB to 1 GiB by 10 %, three pairs each.
void growing(workload_context& context) {
  const cudaStream_t stream = new_stream();
  for (double size = mebibyte; size <= 1024.0 * mebibyte; size *= 1.1) {
    const auto bytes = static_cast<std::size_t>(size);
    for (int pair = 0; pair < 3; ++pair) {
      void* p = context.allocate(bytes, stream);
      touch(p, bytes, stream);
      context.deallocate(p, bytes, stream);
    }
  }
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

/// 500 requests, each on a stream of its own: allocate 8 MiB, write, free, destroy the stream.
void stream_per_request(workload_context& context) {
  constexpr std::size_t bytes = 8 * mebibyte;
  for (int i = 0; i < 500; ++i) {
    const cudaStream_t stream = new_stream();
    void* p = context.allocate(bytes, stream);
    touch(p, bytes, stream);
    context.deallocate(p, bytes, stream);
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  }
}

/// A burst to 60 % of what the device has free, in 16 MiB blocks, all freed,
/// then a second of idling: what the allocator still holds is what another
/// library in the process cannot have (its time includes the second).
void freed_burst(workload_context& context) {
  const cudaStream_t stream = new_stream();
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  constexpr std::size_t block = 16 * mebibyte;
  std::vector<void*> held;
  for (std::size_t sum = 0; sum < free_bytes / 10 * 6; sum += block) held.push_back(context.allocate(block, stream));
  for (void* p : held) context.deallocate(p, block, stream);
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  std::this_thread::sleep_for(std::chrono::seconds(1));
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

/// The same 4 GiB held first as 4 MiB blocks, then as 2 GiB blocks, then as
/// 256 KiB blocks: what one size leaves behind must serve the next.
void size_phases(workload_context& context) {
  const cudaStream_t stream = new_stream();
  constexpr std::size_t total = 4096 * mebibyte;
  for (const std::size_t bytes : {4 * mebibyte, 2048 * mebibyte, mebibyte / 4}) {
    std::vector<void*> held;
    for (std::size_t sum = 0; sum < total; sum += bytes) {
      held.push_back(context.allocate(bytes, stream));
      touch(held.back(), std::min(bytes, mebibyte), stream);
    }
    for (void* p : held) context.deallocate(p, bytes, stream);
  }
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

/// The random mix (256 B .. 4 MiB, up to 1,000 live, mt19937_64 seed 42) over
/// `stream_count` streams: each allocation on a random stream, each free on a
/// random stream after an event orders it after the allocating stream. With a
/// `large_share`, that share of the requests asks for 4 .. 32 MiB instead.
void random_mix(workload_context& context, int stream_count, double large_share = 0) {
  std::vector<cudaStream_t> streams;
  std::vector<cudaEvent_t> events;
  for (int i = 0; i < stream_count; ++i) {
    streams.push_back(new_stream());
    events.emplace_back();
    check(cudaEventCreateWithFlags(&events.back(), cudaEventDisableTiming), "cudaEventCreateWithFlags");
  }
  std::mt19937_64 random(42);
  std::uniform_int_distribution<std::size_t> size(256, 4 * mebibyte);
  std::uniform_int_distribution<std::size_t> large_size(4 * mebibyte + 1, 32 * mebibyte);
  std::bernoulli_distribution coin(0.5);
  std::bernoulli_distribution large(large_share);
  struct live_block {
    void* p;
    std::size_t bytes;
    std::size_t stream;
  };
  std::vector<live_block> live;
  for (int step = 0; step < 100000; ++step) {
    const bool allocate = coin(random);
    const std::size_t bytes = large_share > 0 && large(random) ? large_size(random) : size(random);
    const std::size_t victim = random();
    const std::size_t stream = stream_count == 1 ? 0 : victim % static_cast<std::size_t>(stream_count);
    if ((allocate || live.empty()) && live.size() < 1000) {
      live.push_back({context.allocate(bytes, streams[stream]), bytes, stream});
    } else {
      const std::size_t index = victim % live.size();
      const live_block block = live[index];
      const std::size_t free_on = (victim >> 8) % static_cast<std::size_t>(stream_count);
      if (free_on != block.stream) {
        check(cudaEventRecord(events[block.stream], streams[block.stream]), "cudaEventRecord");
        check(cudaStreamWaitEvent(streams[free_on], events[block.stream], 0), "cudaStreamWaitEvent");
      }
      context.deallocate(block.p, block.bytes, streams[free_on]);
      live[index] = live.back();
      live.pop_back();
    }
  }
  for (const live_block& block : live) context.deallocate(block.p, block.bytes, streams[block.stream]);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  for (int i = 0; i < stream_count; ++i) {
    check(cudaEventDestroy(events[static_cast<std::size_t>(i)]), "cudaEventDestroy");
    check(cudaStreamDestroy(streams[static_cast<std::size_t>(i)]), "cudaStreamDestroy");
  }
}

/// Any entrant as a device resource, so that replay can drive it.
class entrant_resource final : public cudapmr::stream_ordered_resource {
 public:
  explicit entrant_resource(allocator_under_test& allocator)
      : stream_ordered_resource(cudapmr::memory_kind::device, 0), allocator_(allocator) {}
  [[nodiscard]] std::string description() const override { return "benchmark entrant"; }

 private:
  [[nodiscard]] cudapmr::stream_ref do_bound_stream() const noexcept override { return bound_.ref(); }
  void* do_allocate_async(std::size_t bytes, std::size_t, cudapmr::stream_ref stream) override {
    return allocator_.allocate(bytes, stream.get());
  }
  void do_deallocate_async(void* p, std::size_t bytes, std::size_t, cudapmr::stream_ref stream) noexcept override {
    allocator_.deallocate(p, bytes, stream.get());
  }
  allocator_under_test& allocator_;
  cudapmr::stream bound_{0};
};

/// The events of a log with every alignment at most 256 bytes (what every
/// peer gives), or replay's own 16-thread workload recorded over a device pool.
std::vector<replay::event> load_trace(const std::string& path) {
  std::vector<replay::event> events;
  if (!path.empty()) {
    events = replay::read_log(std::filesystem::path(path));
  } else {
    std::ostringstream log;
    {
      cudapmr::device_memory_resource pool(0, cudapmr::device_pool_options{});
      cudapmr::logging_adaptor logging(pool, log);
      replay::run_workload(logging, replay::workload_options{
                                        .threads = 16, .allocations_per_thread = 2000, .max_bytes = 4 * mebibyte});
    }
    std::istringstream in(log.str());
    events = replay::read_log(in);
  }
  for (replay::event& each : events) each.alignment = std::min<std::size_t>(each.alignment, 256);
  return events;
}

void replay_trace(workload_context& context, const std::vector<replay::event>& events) {
  entrant_resource resource(context.allocator);
  const replay::result done = replay::run(events, resource);
  if (done.failures != done.logged_failures)
    throw std::runtime_error(fmt::format("the trace replay was refused {} allocations", done.failures));
  context.operations = done.events;
  context.live_peak = replay::peak_bytes(events);
}

struct named_workload {
  std::string name;
  workload run;
};

/// `trace_name`: the log's file name, or empty for replay's own 16-thread workload.
std::vector<named_workload> workloads(const std::vector<replay::event>& trace, const std::string& trace_name) {
  return {
      {"pair 256 B", [](workload_context& c) { pairs(c, 256); }},
      {"pair 1 MiB", [](workload_context& c) { pairs(c, mebibyte); }},
      {"cross-stream 1 MiB", cross_stream},
      {"growing 1 MiB..1 GiB", growing},
      {"new stream per request", stream_per_request},
      {"phases 4 MiB / 2 GiB / 256 KiB", size_phases},
      {"burst to 60 %, freed, 1 s idle", freed_burst},
      {"random mix, 1 stream", [](workload_context& c) { random_mix(c, 1); }},
      {"random mix, 4 streams", [](workload_context& c) { random_mix(c, 4); }},
      {"random mix to 32 MiB, 1 stream", [](workload_context& c) { random_mix(c, 1, 0.1); }},
      {trace_name.empty() ? std::string("trace replay, 16 threads") : fmt::format("trace replay, {}", trace_name),
       [&trace](workload_context& c) { replay_trace(c, trace); }},
  };
}

struct result {
  double ns_per_operation;
  double lost_over_peak;
  double held_at_most_over_peak = 0;  // read only where asked: it costs a cudaMemGetInfo per allocation
};

/// An entrant that reads the device memory in use after each of its
/// allocations (thread-safe: the trace replay allocates from many threads).
/// Device memory grows only when something is allocated, so this sees every peak.
class peak_reading_allocator final : public allocator_under_test {
 public:
  peak_reading_allocator(std::unique_ptr<allocator_under_test> inner, std::size_t before)
      : inner_(std::move(inner)), most_used_(before) {}
  void* allocate(std::size_t bytes, cudaStream_t stream) override {
    void* p = inner_->allocate(bytes, stream);
    std::size_t used = 0;
    try {
      used = device_used();
    } catch (...) {
      inner_->deallocate(p, bytes, stream);
      throw;
    }
    std::size_t most = most_used_.load(std::memory_order_relaxed);
    while (used > most && !most_used_.compare_exchange_weak(most, used, std::memory_order_relaxed)) {
    }
    return p;
  }
  void deallocate(void* p, std::size_t bytes, cudaStream_t stream) override { inner_->deallocate(p, bytes, stream); }
  [[nodiscard]] std::size_t most_used() const noexcept { return most_used_.load(std::memory_order_relaxed); }

 private:
  std::unique_ptr<allocator_under_test> inner_;
  std::atomic<std::size_t> most_used_;
};

/// One run of `what` over a fresh `who`. With `read_peak`, every allocation
/// also reads the device memory in use (its time is then not the allocator's).
result run_once(const entrant& who, const named_workload& what,
                std::vector<std::pair<std::size_t, std::size_t>>* timeline, bool read_peak = false) {
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const std::size_t before = device_used();
  std::unique_ptr<allocator_under_test> allocator = who.make();
  const peak_reading_allocator* reading = nullptr;
  if (read_peak) {
    auto wrapped = std::make_unique<peak_reading_allocator>(std::move(allocator), before);
    reading = wrapped.get();
    allocator = std::move(wrapped);
  }
  workload_context context{*allocator};
  context.timeline = timeline;
  context.sample_every = 500;
  const auto start = std::chrono::steady_clock::now();
  what.run(context);
  const auto stop = std::chrono::steady_clock::now();
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const std::size_t after = device_used();
  const std::size_t most = reading != nullptr ? reading->most_used() : before;
  allocator.reset();
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const double seconds = std::chrono::duration<double>(stop - start).count();
  const double lost = after > before ? static_cast<double>(after - before) : 0.0;
  const auto live_peak = static_cast<double>(context.live_peak);
  return {seconds * 1e9 / static_cast<double>(context.operations), lost / live_peak,
          static_cast<double>(most - before) / live_peak};
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  int repetitions = 3;
  std::string timeline_path = "memory_timeline.csv";
  std::string only;
  std::vector<std::string> with;
  std::string trace_path;
  bool peak = false;
  CLI::App app(
      "Time and memory side by side: each workload over each device allocator, made fresh for every repetition; "
      "the device memory it lost over the live peak, medians of the repetitions.",
      "cudapmr_memory_bench");
  cudapmr::apps::add_version(app);
  cudapmr::apps::add_integer(app, "--repetitions", repetitions, 1, 1000,
                             "runs of each workload over each allocator (default 3)");
  app.add_option("--timeline", timeline_path, "the CSV of device memory over time (default memory_timeline.csv)")
      ->type_name("FILE");
  app.add_option("--trace", trace_path, "a logging_adaptor log to replay (default: replay's 16-thread workload)")
      ->type_name("FILE");
  app.add_option("--only", only, "run only the workloads whose name contains this")->type_name("WORKLOAD");
  app.add_option("--with", with, "run only the allocators whose name contains one of these (repeatable)")
      ->type_name("ALLOCATOR");
  app.add_flag("--peak", peak,
               "run each workload once more over each allocator, untimed, and report the most device memory it held "
               "while the workload ran over the live peak");
  cudapmr::apps::parse_or_exit(app, argc, argv);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    fmt::print(stderr, "cudapmr_memory_bench: no CUDA device was found\n");
    return 2;
  }
  using namespace bench;
  const std::vector<entrant> all = entrants();
  std::vector<replay::event> trace;
  try {
    trace = load_trace(trace_path);
  } catch (const std::exception& error) {
    fmt::print(stderr, "cudapmr_memory_bench: the trace: {}\n", error.what());
    return 2;
  }
  const std::vector<named_workload> work =
      workloads(trace, trace_path.empty() ? std::string() : std::filesystem::path(trace_path).filename().string());
  std::map<std::pair<std::string, std::string>, result> medians;
  std::vector<const entrant*> chosen;  // the entrants `--with` names (all without it), in their order
  for (const entrant& who : all) {
    const auto named = [&who](const std::string& part) { return who.name.find(part) != std::string::npos; };
    if (with.empty() || std::any_of(with.begin(), with.end(), named)) chosen.push_back(&who);
  }
  std::FILE* timeline_file = std::fopen(timeline_path.c_str(), "w");
  if (timeline_file != nullptr) std::fprintf(timeline_file, "allocator,workload,operation,device_mib\n");
  try {
    for (const named_workload& what : work) {
      if (!only.empty() && what.name.find(only) == std::string::npos) continue;
      for (const entrant* each : chosen) {
        const entrant& who = *each;
        std::vector<double> times;
        std::vector<double> ratios;
        for (int repetition = 0; repetition < repetitions; ++repetition) {
          std::vector<std::pair<std::size_t, std::size_t>> timeline;
          const bool record = repetition == 0 && what.name == "random mix, 4 streams";
          const result once = run_once(who, what, record ? &timeline : nullptr);
          times.push_back(once.ns_per_operation);
          ratios.push_back(once.lost_over_peak);
          if (timeline_file != nullptr)
            for (const auto& [operation, used] : timeline)
              std::fprintf(timeline_file, "\"%s\",\"%s\",%zu,%.1f\n", who.name.c_str(), what.name.c_str(), operation,
                           static_cast<double>(used) / 1048576.0);
        }
        result summary{median(times), median(ratios)};
        fmt::print("{:<26} {:<52} {:>12.0f} ns/op {:>10.2f} lost/peak", what.name, who.name, summary.ns_per_operation,
                   summary.lost_over_peak);
        if (peak) {  // one more run, untimed
          summary.held_at_most_over_peak = run_once(who, what, nullptr, true).held_at_most_over_peak;
          fmt::print(" {:>10.2f} held at most/peak", summary.held_at_most_over_peak);
        }
        medians[{what.name, who.name}] = summary;
        fmt::print("\n");
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& error) {
    fmt::print(stderr, "cudapmr_memory_bench: {}\n", error.what());
    return 1;
  }
  if (timeline_file != nullptr) std::fclose(timeline_file);
  const auto print_table = [&](const std::string& title, const auto& cell) {
    fmt::print("\n## {}\n\n| workload |", title);
    for (const entrant* who : chosen) fmt::print(" {} |", who->name.substr(who->name.find(':') + 1));
    fmt::print("\n|---|");
    for (std::size_t i = 0; i < chosen.size(); ++i) fmt::print("---|");
    fmt::print("\n");
    for (const named_workload& what : work) {
      if (!only.empty() && what.name.find(only) == std::string::npos) continue;
      fmt::print("| {} |", what.name);
      for (const entrant* who : chosen) fmt::print(" {} |", cell(medians[{what.name, who->name}]));
      fmt::print("\n");
    }
  };
  print_table(fmt::format("Time (ns per operation) and device memory lost / live peak, medians of {}", repetitions),
              [](const result& r) { return fmt::format("{:.0f} ns, {:.2f}", r.ns_per_operation, r.lost_over_peak); });
  if (peak)
    print_table("Device memory held at most while the workload ran / live peak (one untimed run)",
                [](const result& r) { return fmt::format("{:.2f}", r.held_at_most_over_peak); });
  return 0;
}
