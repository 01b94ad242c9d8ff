// SPDX-License-Identifier: Apache-2.0
#include "stress.hpp"

#include "adaptor_stack.hpp"
#include "kernels.hpp"

#include <cudapmr/cudapmr.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <random>
#include <stdexcept>
#include <streambuf>
#include <string_view>
#include <thread>

namespace stress {
namespace {

using cudapmr::stream_ordered_resource;
using cudapmr::stream_ref;

/// The most failures kept word for word; later ones are only counted.
constexpr std::size_t failures_kept = 20;

/// The kinds a run draws from, host first (a host-only run has it alone), and
/// the three targets over each: the resource, caching_resource over it, and
/// every adaptor stacked over it.
constexpr std::array<std::string_view, 4> kinds{"host", "device", "pinned", "managed"};
constexpr std::string_view with_caching = "+caching";
constexpr std::string_view with_adaptors = "+adaptors";

/// The names of a run's targets, in the order it makes them.
std::vector<std::string> target_names(bool host_only) {
  std::vector<std::string> names;
  for (const std::string_view kind : kinds) {
    if (host_only && kind != kinds.front()) break;
    for (const std::string_view stack : {std::string_view{}, with_caching, with_adaptors})
      names.push_back(std::string(kind) + std::string(stack));
  }
  return names;
}

/// Failures from every thread.
class failure_log {
 public:
  void add(std::string message) {
    count_.fetch_add(1, std::memory_order_relaxed);
    const std::lock_guard lock(mutex_);
    if (messages_.size() < failures_kept) messages_.push_back(std::move(message));
  }
  /// Read on every operation, so without the lock.
  [[nodiscard]] std::size_t count() const noexcept { return count_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::vector<std::string> messages() const {
    const std::lock_guard lock(mutex_);
    std::vector<std::string> all = messages_;
    if (count() > messages_.size()) all.push_back(fmt::format("... and {} more failures", count() - messages_.size()));
    return all;
  }

 private:
  mutable std::mutex mutex_;
  std::atomic<std::size_t> count_{0};
  std::vector<std::string> messages_;
};

/// A sink for the logging adaptor that keeps nothing and counts the lines.
class line_counter final : public std::streambuf {
 public:
  [[nodiscard]] std::uint64_t lines() const noexcept { return lines_; }

 protected:
  int_type overflow(int_type c) override {
    if (c == '\n') ++lines_;
    return traits_type::not_eof(c);
  }
  std::streamsize xsputn(const char* text, std::streamsize count) override {
    lines_ += static_cast<std::uint64_t>(std::count(text, text + count, '\n'));
    return count;
  }

 private:
  std::uint64_t lines_ = 0;
};

/// One resource or adaptor stack that operations draw from, with its own layers.
struct target {
  std::string name;
  stream_ordered_resource* resource = nullptr;   // the top of the stack
  std::vector<stream_ordered_resource*> layers;  // this target's own adaptors, top first
  std::unique_ptr<line_counter> log_lines;       // for a logging adaptor in the stack
  std::unique_ptr<std::ostream> log;
  std::atomic<std::uint64_t> allocations{0}, nonzero_allocations{0}, bytes_allocated{0}, frees{0}, copies{0},
      fills{0}, kernels{0}, graphs{0}, host_mismatches{0}, misuses{0}, callbacks{0};
  std::size_t index = 0;  // among the targets the run draws from

  [[nodiscard]] bool device_accessible() const noexcept { return resource->is_device_accessible(); }
  [[nodiscard]] bool host_accessible() const noexcept { return resource->is_host_accessible(); }
  [[nodiscard]] bool pageable() const noexcept { return resource->kind() == cudapmr::memory_kind::pageable; }
};

/// The resources and adaptor stacks of a run, bottom resources first.
class environment {
 public:
  explicit environment(const options& chosen) {
    // Never reached by the run: a hit means memory that was not given back.
    cap_ = 4 * std::size_t{chosen.threads} * chosen.max_live * chosen.max_bytes + (std::size_t{64} << 20);
    add_kind("host", own<cudapmr::host_memory_resource>());
    if (chosen.host_only) return;
    add_kind("device", own<cudapmr::device_memory_resource>(0, cudapmr::device_pool_options{}));
    add_kind("pinned", own<cudapmr::pinned_memory_resource>(cudapmr::pinned_pool_options{}));
    add_kind("managed", own<cudapmr::managed_memory_resource>(cudapmr::managed_pool_options{.preferred_device = 0}));
  }
  /// Adaptors before what they stand on.
  ~environment() {
    stacks_.clear();
    while (!resources_.empty()) resources_.pop_back();
  }
  environment(const environment&) = delete;
  environment& operator=(const environment&) = delete;

  /// The targets named in `chosen` (all where it names none), each numbered
  /// by its place among them. The names were validated before.
  [[nodiscard]] std::vector<target*> pick(const std::vector<std::string>& chosen) {
    std::vector<target*> picked;
    for (const auto& made : targets_)
      if (chosen.empty() || std::find(chosen.begin(), chosen.end(), made->name) != chosen.end()) {
        made->index = picked.size();  // its device mismatch counter among the picked
        picked.push_back(made.get());
      }
    return picked;
  }

  /// After every allocation is freed and every stream synchronized: counters
  /// balance, caches empty, and pools hold no used memory.
  void verify_balanced(failure_log& failures) {
    for (const auto& made : targets_) verify_target(*made, failures);
    for (const auto& bottom : bottoms_) verify_bottom(*bottom, failures);
  }

 private:
  template <class Resource, class... Arguments>
  Resource& own(Arguments&&... arguments) {
    auto made = std::make_unique<Resource>(std::forward<Arguments>(arguments)...);
    Resource& resource = *made;
    resources_.push_back(std::move(made));
    return resource;
  }

  /// Three targets over `bottom`: the resource itself, a caching_resource over
  /// it, and every adaptor stacked, the tracker outermost so that it sees
  /// each free before anything counts it.
  void add_kind(const std::string& kind, stream_ordered_resource& bottom) {
    bottoms_.push_back(&bottom);
    target& plain = add_target(kind);
    plain.resource = &bottom;

    target& cached = add_target(kind + std::string(with_caching));
    cached.resource = &own<cudapmr::caching_resource>(bottom);
    cached.layers = {cached.resource};

    target& stacked = add_target(kind + std::string(with_adaptors));
    stacked.log_lines = std::make_unique<line_counter>();
    stacked.log = std::make_unique<std::ostream>(stacked.log_lines.get());
    auto& layers = *stacks_.emplace_back(std::make_unique<cudapmr::apps::adaptor_stack>(
        bottom, cudapmr::apps::adaptor_stack_options{
                    .cap = cap_,
                    .log = stacked.log.get(),
                    .on_failure =
                        [&stacked](const cudapmr::allocation_failure&) {
                          stacked.callbacks.fetch_add(1, std::memory_order_relaxed);
                          return false;
                        },
                    .tracking = cudapmr::tracking_options{.on_misuse = [&stacked](const cudapmr::misuse_report&) {
                      stacked.misuses.fetch_add(1, std::memory_order_relaxed);
                    }}}));
    stacked.resource = &layers.top();
    stacked.layers = layers.layers();
  }

  target& add_target(std::string name) {
    targets_.push_back(std::make_unique<target>());
    targets_.back()->name = std::move(name);
    return *targets_.back();
  }

  static void verify_target(target& made, failure_log& failures) {
    const auto fail = [&](const std::string& what) { failures.add(fmt::format("{}: {}", made.name, what)); };
    const std::uint64_t counted = made.nonzero_allocations.load();
    if (made.allocations.load() != made.frees.load())
      fail(fmt::format("{} allocations but {} frees", made.allocations.load(), made.frees.load()));
    if (made.misuses.load() != 0) fail(fmt::format("the tracker reported {} bad frees", made.misuses.load()));
    if (made.callbacks.load() != 0) fail(fmt::format("the upstream ran out of memory {} times", made.callbacks.load()));
    for (stream_ordered_resource* layer : made.layers) {
      if (auto* tracking = dynamic_cast<cudapmr::tracking_adaptor*>(layer); tracking && tracking->outstanding_count())
        fail(tracking->leak_report());
      if (auto* statistics = dynamic_cast<cudapmr::statistics_adaptor*>(layer)) {
        const cudapmr::resource_statistics counted_there = statistics->statistics();
        if (counted_there.bytes.current != 0 || counted_there.allocations.current != 0)
          fail(fmt::format("statistics_adaptor: {} bytes in {} allocations still counted as current",
                           counted_there.bytes.current, counted_there.allocations.current));
        if (counted_there.allocations.total != static_cast<std::int64_t>(counted))
          fail(fmt::format("statistics_adaptor counted {} allocations, the run made {}",
                           counted_there.allocations.total, counted));
      }
      if (auto* limiting = dynamic_cast<cudapmr::limiting_adaptor*>(layer); limiting && limiting->used_bytes())
        fail(fmt::format("limiting_adaptor: {} bytes still counted as used", limiting->used_bytes()));
      if (auto* logging = dynamic_cast<cudapmr::logging_adaptor*>(layer)) {
        logging->flush();
        if (made.log_lines->lines() != 1 + 2 * counted)
          fail(fmt::format("logging_adaptor wrote {} lines; a header and two per allocation make {}",
                           made.log_lines->lines(), 1 + 2 * counted));
      }
      if (auto* caching = dynamic_cast<cudapmr::caching_resource*>(layer)) {
        caching->release();
        if (const cudapmr::cache_statistics cache = caching->statistics(); cache.cached_blocks != 0)
          fail(fmt::format("caching_resource still holds {} blocks after release", cache.cached_blocks));
      }
    }
  }

  static void verify_bottom(stream_ordered_resource& bottom, failure_log& failures) {
    if (auto* host = dynamic_cast<cudapmr::host_memory_resource*>(&bottom); host && host->used_bytes() != 0)
      failures.add(fmt::format("{}: {} bytes still in use", host->description(), host->used_bytes()));
    if (auto* pool = dynamic_cast<cudapmr::pool_resource*>(&bottom)) {
      CUDAPMR_CHECK(cudaStreamSynchronize(pool->bound_stream().get()));
      if (const cudapmr::pool_stats stats = pool->stats(); stats.used_current != 0)
        failures.add(fmt::format("{}: {} bytes still used", pool->description(), stats.used_current));
      pool->trim_to(0);
    }
  }

  std::size_t cap_ = 0;
  std::vector<std::unique_ptr<target>> targets_;  // outlive the resources: they hold the logging sinks
  std::vector<stream_ordered_resource*> bottoms_;
  std::vector<std::unique_ptr<stream_ordered_resource>> resources_;  // in construction order
  std::vector<std::unique_ptr<cudapmr::apps::adaptor_stack>> stacks_;  // over resources_
};

/// One live allocation of a worker.
struct block {
  target* where;
  std::byte* data;
  std::size_t bytes;
  std::size_t alignment;
  pattern expected;
  bool from_pmr;
};

/// One step of a thread, for --trace.
struct trace_event {
  std::int64_t nanoseconds;  // steady clock
  unsigned thread;
  const char* what;
  const target* where;
  const void* pointer;
  std::size_t bytes;
  cudaStream_t stream;
};

std::int64_t steady_nanoseconds() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// One thread's share of the run, on one stream.
class worker {
 public:
  worker(const options& chosen, std::vector<target*> targets, std::vector<stream_ref> streams, unsigned index,
         failure_log& failures, std::atomic<std::uint64_t>& done)
      : options_(chosen),
        targets_(std::move(targets)),
        streams_(std::move(streams)),
        stream_(streams_[index % streams_.size()]),
        index_(index),
        random_(chosen.seed * 0x9e3779b97f4a7c15ULL + index),
        next_seed_(index * 0x01000193u + 1),
        failures_(failures),
        done_(done) {}

  /// Runs `operations` random operations, then frees what is left.
  void run(std::uint64_t operations) {
    try {
      if (!options_.host_only) {
        CUDAPMR_CHECK(cudaSetDevice(0));
        CUDAPMR_CHECK(cudaMalloc(reinterpret_cast<void**>(&device_mismatches_),
                                 targets_.size() * sizeof(unsigned long long)));
        CUDAPMR_CHECK(cudaMemset(device_mismatches_, 0, targets_.size() * sizeof(unsigned long long)));
        CUDAPMR_CHECK(cudaEventCreateWithFlags(&handed_over_, cudaEventDisableTiming));
      }
      for (std::uint64_t i = 0; i < operations && failures_.count() < failures_kept; ++i) {
        step();
        done_.fetch_add(1, std::memory_order_relaxed);
      }
      while (!live_.empty()) {
        check_and_free(live_.size() - 1);
        ++final_frees_;
      }
      if (!options_.host_only) {
        collect_device_mismatches();
        CUDAPMR_CHECK(cudaEventDestroy(handed_over_));
      }
    } catch (const std::exception& error) {
      failures_.add(fmt::format("thread on stream {}: {}", fmt::ptr(stream_.get()), error.what()));
    }
  }

  [[nodiscard]] std::uint64_t final_frees() const noexcept { return final_frees_; }
  [[nodiscard]] const std::vector<trace_event>& trace() const noexcept { return trace_; }
  [[nodiscard]] const std::vector<unsigned long long>& device_mismatches() const noexcept { return mismatches_; }

 private:
  void step() {
    const double choice = uniform(random_);
    if (!options_.host_only && choice >= 0.999) return captured_round();
    if (live_.empty() || (choice < 0.35 && live_.size() < options_.max_live)) return allocate_one();
    const std::size_t chosen = pick(live_.size());
    if (choice < 0.60) return check_and_free(chosen);
    if (choice < 0.72 && live_.size() < options_.max_live) return copy(live_[chosen]);
    if (choice < 0.86) return fill(live_[chosen]);
    return add(live_[chosen]);
  }

  void note(const char* what, const block& made, stream_ref stream) {
    if (!options_.trace_path.empty())
      trace_.push_back({steady_nanoseconds(), index_, what, made.where, made.data, made.bytes, stream.get()});
  }

  void allocate_one() {
    target& where = *targets_[pick(targets_.size())];
    if (std::optional<block> made = allocate(where, random_size())) {
      stamp(*made);
      live_.push_back(*made);
    }
  }

  /// Allocates `bytes` on `where`, through pmr one time in ten.
  std::optional<block> allocate(target& where, std::size_t bytes) {
    const std::size_t alignment = std::size_t{1} << pick(17);  // 1 byte to 64 KiB
    void* p = nullptr;
    const bool through_pmr = uniform(random_) < 0.1;
    try {
      p = through_pmr ? where.resource->allocate(bytes, alignment)
                      : where.resource->allocate_async(bytes, alignment, stream_);
    } catch (const cudapmr::out_of_memory& error) {
      failures_.add(fmt::format("{}: {}", where.name, error.what()));
      return std::nullopt;
    }
    where.allocations.fetch_add(1, std::memory_order_relaxed);
    where.bytes_allocated.fetch_add(bytes, std::memory_order_relaxed);
    if (bytes != 0) where.nonzero_allocations.fetch_add(1, std::memory_order_relaxed);
    if (bytes != 0 && reinterpret_cast<std::uintptr_t>(p) % alignment != 0)
      failures_.add(fmt::format("{}: {} bytes at {} are not aligned to {}", where.name, bytes, p, alignment));
    const block made{&where, static_cast<std::byte*>(p), bytes, alignment, {}, through_pmr};
    note(through_pmr ? "allocate(pmr)" : "allocate", made, stream_);
    return made;
  }

  void stamp(block& made) {
    made.expected = pattern{next_seed_++, false, 0, 0};
    if (made.bytes == 0) return;
    note("stamp", made, stream_);
    if (made.where->pageable()) {
      auto* bytes = reinterpret_cast<std::uint8_t*>(made.data);
      for (std::size_t i = 0; i < made.bytes; ++i) bytes[i] = sequence_byte(made.expected.seed, i);
    } else {
      stamp_on_device(made.data, made.bytes, made.expected.seed, stream_);
    }
  }

  /// Checks the pattern, then frees: device memory with a kernel queued before
  /// the free; host-accessible memory on the host, after the stream's work.
  void check_and_free(std::size_t index) {
    block freed = live_[index];
    live_[index] = live_.back();
    live_.pop_back();
    target& where = *freed.where;
    // Either way, but zero bytes the way they came: allocate_async gives null,
    // which pmr deallocate refuses, and pmr allocate a pointer that owns nothing.
    const bool through_pmr = freed.bytes == 0 ? freed.from_pmr : uniform(random_) < 0.1;
    if (freed.bytes != 0) {
      if (where.host_accessible()) {
        if (!where.pageable()) CUDAPMR_CHECK(cudaStreamSynchronize(stream_.get()));
        check_on_host(freed);
      } else {
        check_on_device(freed.data, freed.bytes, freed.expected, device_mismatches_ + where.index, stream_);
      }
      note("check", freed, stream_);
    }
    if (through_pmr) {
      // pmr's deallocate takes memory no longer in use: the stream's work on it must be done.
      if (!where.pageable()) CUDAPMR_CHECK(cudaStreamSynchronize(stream_.get()));
      note("free(pmr)", freed, stream_);
      where.resource->deallocate(freed.data, freed.bytes, freed.alignment);
    } else {
      const stream_ref freeing = free_stream();
      note("free", freed, freeing);
      where.resource->deallocate_async(freed.data, freed.bytes, freed.alignment, freeing);
    }
    where.frees.fetch_add(1, std::memory_order_relaxed);
  }

  /// Where a stream-ordered free goes: one time in four another stream,
  /// ordered after this one's work by an event, as a consumer stream would.
  stream_ref free_stream() {
    if (streams_.size() < 2 || uniform(random_) >= 0.25) return stream_;
    const stream_ref other = streams_[pick(streams_.size())];
    if (!options_.host_only && other != stream_) {
      CUDAPMR_CHECK(cudaEventRecord(handed_over_, stream_.get()));
      CUDAPMR_CHECK(cudaStreamWaitEvent(other.get(), handed_over_, 0));
    }
    return other;
  }

  void check_on_host(const block& checked) {
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(checked.data);
    std::uint64_t wrong = 0;
    for (std::size_t i = 0; i < checked.bytes; ++i) wrong += bytes[i] != expected_byte(checked.expected, i) ? 1u : 0u;
    if (wrong == 0) return;
    checked.where->host_mismatches.fetch_add(wrong, std::memory_order_relaxed);
    failures_.add(fmt::format("{}: {} of the {} bytes at {} (alignment {}) lost their pattern", checked.where->name,
                              wrong, checked.bytes, fmt::ptr(checked.data), checked.alignment));
  }

  /// Copies a block into a new one of the same size on a random target.
  /// Pageable memory is only ever touched synchronously, so a copy to or from
  /// it first waits for the stream's earlier work.
  void copy(const block& source) {
    target& where = *targets_[pick(targets_.size())];
    std::optional<block> made = allocate(where, source.bytes);
    if (!made) return;
    made->expected = source.expected;
    if (source.bytes != 0) {
      if (source.where->pageable() && where.pageable()) {
        std::memcpy(made->data, source.data, source.bytes);
      } else {
        if (source.where->pageable() || where.pageable()) CUDAPMR_CHECK(cudaStreamSynchronize(stream_.get()));
        CUDAPMR_CHECK(cudaMemcpyAsync(made->data, source.data, source.bytes, cudaMemcpyDefault, stream_.get()));
        // Into pinned memory the driver may copy with the CPU, unseen by initcheck.
        if (where.host_accessible() && !where.pageable()) cudapmr::mark_initialized(made->data, source.bytes, stream_);
      }
    }
    note("copy-from", source, stream_);
    note("copy-into", *made, stream_);
    source.where->copies.fetch_add(1, std::memory_order_relaxed);
    live_.push_back(*made);
  }

  void fill(block& filled) {
    const auto value = static_cast<std::uint8_t>(pick(256));
    filled.expected = pattern{0, true, value, 0};
    if (filled.bytes == 0) {
      // nothing to write (and memset takes no null pointer)
    } else if (filled.where->pageable()) {
      std::memset(filled.data, value, filled.bytes);
    } else {
      CUDAPMR_CHECK(cudaMemsetAsync(filled.data, value, filled.bytes, stream_.get()));
    }
    note("fill", filled, stream_);
    filled.where->fills.fetch_add(1, std::memory_order_relaxed);
  }

  /// The "kernel" operation: adds a value to every byte (on the host for pageable memory).
  void add(block& changed) {
    const auto value = static_cast<std::uint8_t>(1 + pick(255));
    changed.expected.added = static_cast<std::uint8_t>(changed.expected.added + value);
    if (changed.where->pageable()) {
      auto* bytes = reinterpret_cast<std::uint8_t*>(changed.data);
      for (std::size_t i = 0; i < changed.bytes; ++i) bytes[i] = static_cast<std::uint8_t>(bytes[i] + value);
    } else if (changed.bytes != 0) {
      add_on_device(changed.data, changed.bytes, value, stream_);
    }
    note("add", changed, stream_);
    changed.where->kernels.fetch_add(1, std::memory_order_relaxed);
  }

  /// Captures a graph on this thread's own stream that allocates from a
  /// device target, stamps, checks and frees; then launches it twice. Under
  /// capture the caches must go to the pool's graph nodes: a cached block
  /// handed to a graph would be used again at each launch, whoever owns it.
  void captured_round() {
    std::vector<target*> device_targets;
    for (target* each : targets_)
      if (each->resource->kind() == cudapmr::memory_kind::device) device_targets.push_back(each);
    if (device_targets.empty()) return;
    target& where = *device_targets[pick(device_targets.size())];
    if (!capture_stream_) capture_stream_.emplace(0);
    const stream_ref captured = capture_stream_->ref();
    const std::size_t bytes = std::max<std::size_t>(1, random_size());
    const pattern expected{next_seed_++, false, 0, 0};

    cudaGraph_t graph = nullptr;
    CUDAPMR_CHECK(cudaStreamBeginCapture(captured.get(), cudaStreamCaptureModeThreadLocal));
    try {
      void* p = where.resource->allocate_async(bytes, 256, captured);
      const block in_graph{&where, static_cast<std::byte*>(p), bytes, 256, expected, false};
      note("graph-allocate", in_graph, captured);
      stamp_on_device(p, bytes, expected.seed, captured);
      check_on_device(p, bytes, expected, device_mismatches_ + where.index, captured);
      note("graph-free", in_graph, captured);
      where.resource->deallocate_async(p, bytes, 256, captured);
    } catch (...) {
      if (cudaStreamEndCapture(captured.get(), &graph) == cudaSuccess && graph != nullptr) cudaGraphDestroy(graph);
      throw;
    }
    CUDAPMR_CHECK(cudaStreamEndCapture(captured.get(), &graph));
    cudaGraphExec_t executable = nullptr;
    const cudaError_t instantiated = cudaGraphInstantiate(&executable, graph, 0);
    CUDAPMR_CHECK(cudaGraphDestroy(graph));
    CUDAPMR_CHECK(instantiated);
    for (int launch = 0; launch < 2; ++launch) CUDAPMR_CHECK(cudaGraphLaunch(executable, captured.get()));
    CUDAPMR_CHECK(cudaStreamSynchronize(captured.get()));
    CUDAPMR_CHECK(cudaGraphExecDestroy(executable));
    where.allocations.fetch_add(1, std::memory_order_relaxed);
    where.nonzero_allocations.fetch_add(1, std::memory_order_relaxed);
    where.bytes_allocated.fetch_add(bytes, std::memory_order_relaxed);
    where.frees.fetch_add(1, std::memory_order_relaxed);
    where.graphs.fetch_add(1, std::memory_order_relaxed);
  }

  void collect_device_mismatches() {
    mismatches_.assign(targets_.size(), 0);
    CUDAPMR_CHECK(cudaStreamSynchronize(stream_.get()));
    CUDAPMR_CHECK(cudaMemcpy(mismatches_.data(), device_mismatches_, mismatches_.size() * sizeof(unsigned long long),
                             cudaMemcpyDeviceToHost));
    CUDAPMR_CHECK(cudaFree(device_mismatches_));
    device_mismatches_ = nullptr;
  }

  /// Log-uniform from 1 byte to max_bytes, and zero bytes one time in a hundred.
  std::size_t random_size() {
    if (uniform(random_) < 0.01) return 0;
    const double exponent = uniform(random_) * std::log2(static_cast<double>(options_.max_bytes));
    return std::clamp<std::size_t>(static_cast<std::size_t>(std::exp2(exponent)), 1, options_.max_bytes);
  }
  std::size_t pick(std::size_t count) { return std::uniform_int_distribution<std::size_t>(0, count - 1)(random_); }

  const options& options_;
  std::vector<target*> targets_;
  std::vector<stream_ref> streams_;  // every stream of the run; this worker's own is `stream_`
  stream_ref stream_;
  unsigned index_;
  cudaEvent_t handed_over_ = nullptr;
  std::mt19937_64 random_;
  std::uniform_real_distribution<double> uniform{0.0, 1.0};
  std::uint32_t next_seed_;
  failure_log& failures_;
  std::atomic<std::uint64_t>& done_;  // operations done by every worker, for the progress line
  std::vector<block> live_;
  unsigned long long* device_mismatches_ = nullptr;  // one counter per target
  std::optional<cudapmr::stream> capture_stream_;     // this thread's alone: captures never meet other threads' work
  std::vector<unsigned long long> mismatches_;
  std::uint64_t final_frees_ = 0;
  std::vector<trace_event> trace_;
};

using trace_file = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;

/// The --trace file, opened before the run so that an unwritable path costs no run.
trace_file open_trace(const std::string& path) {
  trace_file file(std::fopen(path.c_str(), "w"), &std::fclose);
  if (!file) throw std::invalid_argument(fmt::format("--trace {}: cannot write it: {}", path, std::strerror(errno)));
  return file;
}

/// Every worker's steps in time order (each worker's own already are), one per line.
void write_trace(std::FILE* file, const std::vector<std::unique_ptr<worker>>& workers) {
  std::vector<trace_event> all;
  for (const auto& each : workers) all.insert(all.end(), each->trace().begin(), each->trace().end());
  std::stable_sort(all.begin(), all.end(),
                   [](const trace_event& a, const trace_event& b) { return a.nanoseconds < b.nanoseconds; });
  fmt::print(file, "nanoseconds thread what target pointer bytes stream\n");
  const std::int64_t start = all.empty() ? 0 : all.front().nanoseconds;
  for (const trace_event& each : all)
    fmt::print(file, "{} {} {} {} {} {} {}\n", each.nanoseconds - start, each.thread, each.what, each.where->name,
               fmt::ptr(each.pointer), each.bytes, fmt::ptr(each.stream));
}

void validate(const options& chosen) {
  if (chosen.threads == 0 || chosen.streams == 0 || chosen.max_bytes == 0 || chosen.max_live == 0)
    throw std::invalid_argument(fmt::format("threads ({}), streams ({}), max bytes ({}) and max live ({}) must be "
                                            "at least 1",
                                            chosen.threads, chosen.streams, chosen.max_bytes, chosen.max_live));
  if (chosen.max_bytes > (std::size_t{1} << 30))
    throw std::invalid_argument(fmt::format("max bytes {} is above 1 GiB", chosen.max_bytes));
  const std::vector<std::string> names = target_names(chosen.host_only);
  for (const std::string& name : chosen.targets)
    if (std::find(names.begin(), names.end(), name) == names.end())
      throw std::invalid_argument(fmt::format("--targets {}: no such target in {}run; it has {}", name,
                                              chosen.host_only ? "a --host-only " : "this ", fmt::join(names, ", ")));
}

}  // namespace

report run(const options& chosen) {
  validate(chosen);
  trace_file trace(nullptr, &std::fclose);
  if (!chosen.trace_path.empty()) trace = open_trace(chosen.trace_path);
  if (!chosen.host_only) static_cast<void>(cudapmr::device(0));  // no device: cuda_error before anything starts
  environment resources(chosen);
  std::vector<target*> targets = resources.pick(chosen.targets);
  failure_log failures;

  // Real streams on the GPU; without one, distinct handles that only the
  // adaptors' per-stream bookkeeping sees (the host resource ignores streams).
  std::vector<cudapmr::stream> owned_streams;
  std::vector<stream_ref> streams;
  for (unsigned i = 0; i < chosen.streams; ++i) {
    if (chosen.host_only) {
      streams.emplace_back(reinterpret_cast<cudaStream_t>(std::uintptr_t{0x1000} * (i + 1)));
    } else {
      owned_streams.emplace_back(0);
      streams.push_back(owned_streams.back().ref());
    }
  }

  std::atomic<std::uint64_t> operations_done{0};
  std::vector<std::unique_ptr<worker>> workers;
  for (unsigned i = 0; i < chosen.threads; ++i)
    workers.push_back(std::make_unique<worker>(chosen, targets, streams, i, failures, operations_done));
  const auto start = std::chrono::steady_clock::now();
  {
    std::atomic<unsigned> finished{0};
    std::vector<std::jthread> threads;
    for (unsigned i = 0; i < chosen.threads; ++i) {
      const std::uint64_t share = chosen.operations / chosen.threads + (i < chosen.operations % chosen.threads ? 1 : 0);
      threads.emplace_back([&workers, &finished, i, share] {
        workers[i]->run(share);
        finished.fetch_add(1, std::memory_order_release);
      });
    }
    while (chosen.on_progress && finished.load(std::memory_order_acquire) < chosen.threads) {
      chosen.on_progress(operations_done.load(std::memory_order_relaxed), chosen.operations);
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
  }
  for (cudapmr::stream& owned : owned_streams) owned.synchronize();
  const auto end = std::chrono::steady_clock::now();

  report result;
  result.operations = chosen.operations;
  result.seconds = std::chrono::duration<double>(end - start).count();
  for (const auto& done : workers) result.final_frees += done->final_frees();
  for (target* made : targets) {
    target_report line{made->name,           made->allocations.load(), made->bytes_allocated.load(),
                       made->frees.load(),   made->copies.load(),      made->fills.load(),
                       made->kernels.load(), made->graphs.load(), made->host_mismatches.load()};
    for (const auto& done : workers)
      if (made->index < done->device_mismatches().size()) line.mismatches += done->device_mismatches()[made->index];
    if (line.mismatches != made->host_mismatches.load())
      failures.add(fmt::format("{}: {} bytes lost their pattern on the device", made->name,
                               line.mismatches - made->host_mismatches.load()));
    result.targets.push_back(line);
  }
  if (trace) write_trace(trace.get(), workers);
  resources.verify_balanced(failures);
  result.failures = failures.messages();
  result.failure_count = failures.count();
  return result;
}

}  // namespace stress
