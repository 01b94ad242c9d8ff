// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: random allocate, free and resize sequences through every
// adaptor stacked over the host test resource, checking after each step that
// no two live blocks overlap, that contents survive, and that every counter
// agrees with what is live; at the end everything is freed and every counter
// is back to zero. A broken invariant aborts, which the fuzzer reports.
#include "adaptor_stack.hpp"

#include <cudapmr/host_memory_resource.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <ostream>
#include <vector>

namespace {

using namespace cudapmr;

constexpr std::size_t cap = std::size_t{1} << 22;  // the limiting adaptor's; requests reach past it
constexpr std::size_t stream_count = 4;

[[noreturn]] void fail(const char* invariant, std::size_t value, std::size_t expected) {
  std::fprintf(stderr, "adaptor_fuzzer: %s: %zu, expected %zu\n", invariant, value, expected);
  std::abort();
}
void require(bool holds, const char* invariant) {
  if (holds) return;
  std::fprintf(stderr, "adaptor_fuzzer: %s\n", invariant);
  std::abort();
}
void require_equal(std::size_t value, std::size_t expected, const char* invariant) {
  if (value != expected) fail(invariant, value, expected);
}

/// Reads the fuzzer's bytes as a sequence of small numbers; zeros once they run out.
class input {
 public:
  input(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  [[nodiscard]] bool done() const noexcept { return position_ >= size_; }
  std::uint8_t byte() { return position_ < size_ ? data_[position_++] : 0; }
  std::size_t below(std::size_t bound) { return (std::size_t{byte()} | std::size_t{byte()} << 8) % bound; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t position_ = 0;
};

struct block {
  std::byte* data;
  std::size_t bytes;
  std::size_t alignment;
  std::size_t stream;
  bool through_pmr;
  std::uint8_t seed;
};

stream_ref fake_stream(std::size_t index) {
  return stream_ref(reinterpret_cast<cudaStream_t>(std::uintptr_t{0x1000} * (index + 1)));
}

std::uint8_t content(const block& b, std::size_t i) { return static_cast<std::uint8_t>(b.seed + i * 7); }

void write_content(const block& b) {
  for (std::size_t i = 0; i < b.bytes; ++i) b.data[i] = std::byte{content(b, i)};
}

void check_content(const block& b, std::size_t bytes) {
  for (std::size_t i = 0; i < bytes; ++i)
    if (b.data[i] != std::byte{content(b, i)}) fail("a byte of a live block changed", i, b.bytes);
}

/// The stack under test, outermost first: tracking, statistics, limiting,
/// logging, failure callback, caching, host.
class stack {
 public:
  stack()
      : layers_(host_, apps::adaptor_stack_options{
                           .cap = cap,
                           .log = &log_,
                           .on_failure = [](const allocation_failure& failure) { return failure.attempt < 2; },
                           .tracking = tracking_options{.freed_history = 64,
                                                        .on_misuse = [this](const misuse_report&) { ++misuses_; }}}) {}

  stream_ordered_resource& top() { return layers_.top(); }

  void allocate(input& in) {
    const std::size_t bytes = in.byte() % 4 == 0 ? cap + 1 + in.below(64) : in.below(4096);  // past the cap, or small
    block made{nullptr, bytes, std::size_t{1} << in.below(13), in.below(stream_count), in.byte() % 4 == 0,
               in.byte()};
    void* p = nullptr;
    try {
      p = made.through_pmr ? top().allocate(bytes, made.alignment)
                           : top().allocate_async(bytes, made.alignment, fake_stream(made.stream));
    } catch (const out_of_memory&) {
      require(bytes + live_bytes_ > cap, "out_of_memory below the cap");
      return;
    }
    require(bytes + live_bytes_ <= cap, "an allocation past the cap succeeded");
    require(reinterpret_cast<std::uintptr_t>(p) % made.alignment == 0, "misaligned pointer");
    made.data = static_cast<std::byte*>(p);
    if (bytes == 0) {
      // stream-ordered: null; pmr (which libstdc++ declares never null): a pointer that owns nothing.
      require((p == nullptr) != made.through_pmr, "zero bytes: null from allocate_async only");
      if (made.through_pmr) top().deallocate(p, 0, made.alignment);
      return;
    }
    require_no_overlap(made);
    write_content(made);
    live_.emplace(reinterpret_cast<std::uintptr_t>(p), made);
    live_bytes_ += bytes;
  }

  void free(input& in) {
    if (live_.empty()) return;
    auto chosen = std::next(live_.begin(), static_cast<std::ptrdiff_t>(in.below(live_.size())));
    const block freed = chosen->second;
    check_content(freed, freed.bytes);
    live_.erase(chosen);
    live_bytes_ -= freed.bytes;
    release(freed, in.byte() % 4 == 0, in.below(stream_count));
  }

  /// A resize: a new block, the common prefix copied, the old block freed.
  void resize(input& in) {
    if (live_.empty()) return;
    auto chosen = std::next(live_.begin(), static_cast<std::ptrdiff_t>(in.below(live_.size())));
    const block old = chosen->second;
    const std::size_t bytes = 1 + in.below(8192);
    void* p = nullptr;
    try {
      p = top().allocate_async(bytes, old.alignment, fake_stream(old.stream));
    } catch (const out_of_memory&) {
      require(bytes + live_bytes_ > cap, "out_of_memory below the cap");
      return;
    }
    block grown{static_cast<std::byte*>(p), bytes, old.alignment, old.stream, false, old.seed};
    require_no_overlap(grown);
    std::memcpy(grown.data, old.data, std::min(bytes, old.bytes));
    check_content(grown, std::min(bytes, old.bytes));
    write_content(grown);
    live_.erase(chosen);
    live_bytes_ -= old.bytes;
    release(old, false, old.stream);
    live_.emplace(reinterpret_cast<std::uintptr_t>(p), grown);
    live_bytes_ += bytes;
  }

  /// A free the tracker must refuse: a double free, a wrong size, an unknown pointer.
  void bad_free(input& in) {
    const std::size_t misuses = misuses_;
    const std::size_t kind = in.below(3);
    if (kind == 0 && last_freed_ != nullptr && live_.find(reinterpret_cast<std::uintptr_t>(last_freed_)) == live_.end()) {
      top().deallocate_async(last_freed_, last_freed_bytes_, fake_stream(0));
    } else if (kind == 1 && !live_.empty()) {
      const block& victim = live_.begin()->second;
      top().deallocate_async(victim.data, victim.bytes + 1, victim.alignment, fake_stream(victim.stream));
    } else {
      static std::byte foreign[64];
      top().deallocate_async(foreign, sizeof foreign, fake_stream(0));
    }
    require_equal(misuses_, misuses + 1, "the tracker's reports of a bad free");
  }

  void release_cache() { layers_.caching().release(); }

  /// What every layer counts must match what is live.
  void check_counters() {
    require_equal(layers_.tracking().outstanding_count(), live_.size(), "tracking_adaptor outstanding_count");
    require_equal(layers_.tracking().outstanding_bytes(), live_bytes_, "tracking_adaptor outstanding_bytes");
    const resource_statistics counted = layers_.statistics().statistics();
    require_equal(static_cast<std::size_t>(counted.bytes.current), live_bytes_, "statistics_adaptor bytes");
    require_equal(static_cast<std::size_t>(counted.allocations.current), live_.size(), "statistics_adaptor allocations");
    require_equal(layers_.limiting().used_bytes(), live_bytes_, "limiting_adaptor used_bytes");
    const cache_statistics cached = layers_.caching().statistics();
    require(host_.used_bytes() >= live_bytes_ + cached.cached_bytes, "host resource holds less than is live");
  }

  /// Frees everything; every counter must come back to zero.
  void finish() {
    while (!live_.empty()) {
      const block freed = live_.begin()->second;
      check_content(freed, freed.bytes);
      live_.erase(live_.begin());
      live_bytes_ -= freed.bytes;
      release(freed, freed.through_pmr, freed.stream);
    }
    check_counters();
    layers_.caching().release();
    require_equal(layers_.caching().statistics().cached_bytes, 0, "caching_resource cached bytes after release");
    require_equal(host_.used_bytes(), 0, "host resource used bytes at the end");
  }

 private:
  void release(const block& freed, bool through_pmr, std::size_t stream) {
    if (through_pmr) top().deallocate(freed.data, freed.bytes, freed.alignment);
    else top().deallocate_async(freed.data, freed.bytes, freed.alignment, fake_stream(stream));
    last_freed_ = freed.data;
    last_freed_bytes_ = freed.bytes;
  }

  void require_no_overlap(const block& made) const {
    const auto start = reinterpret_cast<std::uintptr_t>(made.data);
    const auto next = live_.lower_bound(start);
    if (next != live_.end()) require(start + made.bytes <= next->first, "a new block overlaps the next live block");
    if (next != live_.begin()) {
      const auto& previous = std::prev(next)->second;
      require(reinterpret_cast<std::uintptr_t>(previous.data) + previous.bytes <= start,
              "a new block overlaps the previous live block");
    }
  }

  host_memory_resource host_;
  std::ostream log_{nullptr};  // no buffer: the lines are formatted and dropped
  std::size_t misuses_ = 0;
  apps::adaptor_stack layers_;
  std::map<std::uintptr_t, block> live_;
  std::size_t live_bytes_ = 0;
  void* last_freed_ = nullptr;
  std::size_t last_freed_bytes_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  input in(data, size);
  stack under_test;
  for (int step = 0; step < 4096 && !in.done(); ++step) {
    switch (in.byte() % 8) {
      case 0:
      case 1:
      case 2: under_test.allocate(in); break;
      case 3:
      case 4: under_test.free(in); break;
      case 5: under_test.resize(in); break;
      case 6: under_test.bad_free(in); break;
      default: under_test.release_cache(); break;
    }
    under_test.check_counters();
  }
  under_test.finish();
  return 0;
}
