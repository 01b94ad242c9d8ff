// SPDX-License-Identifier: Apache-2.0
#pragma once
// A model of CUDA's stream order for host tests, and a leaf resource over it.
// Each stream is a queue of work items; events carry a vector clock of what
// was queued before them; a wait merges that clock into the waiting stream's;
// work completes only when the model says so (at random, in an order that
// respects every wait). The program under test tells the model what it queues
// and what it frees; the model checks every block a resource hands out, or
// gives back to its leaf, against the work queued before the block's last
// free: that work must be ordered before the new owner, or complete.

#include <cudapmr/detail/stream_ordering.hpp>
#include <cudapmr/error.hpp>
#include <cudapmr/stream_ordered_resource.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <string>
#include <vector>

namespace cudapmr::test {

class stream_order_model final : public detail::stream_ordering {
 public:
  /// \param seed the model's own choices: which events complete when asked, which waits CUDA refuses.
  explicit stream_order_model(std::uint64_t seed) : random_(seed) {}

  // ---- what a resource asks of CUDA -------------------------------------------------

  detail::ordering_event record(stream_ref stream) noexcept override {
    const std::lock_guard lock(mutex_);
    event* made = nullptr;
    if (!spare_events_.empty()) {
      made = spare_events_.back();
      spare_events_.pop_back();
    } else {
      made = events_.emplace_back(std::make_unique<event>()).get();
    }
    made->clock = clock_of(index_of(stream.get()));
    made->recycled = false;
    return made;
  }
  bool has_completed(detail::ordering_event handle) noexcept override {
    const std::lock_guard lock(mutex_);
    const event& e = *checked(handle, "has_completed");
    if (is_complete(e.clock)) return true;
    if (chance(3)) {  // the GPU got there meanwhile
      complete(e.clock);
      return true;
    }
    return false;
  }
  bool wait(detail::ordering_event handle) noexcept override {
    const std::lock_guard lock(mutex_);
    complete(checked(handle, "wait")->clock);  // the host waits until the GPU gets there
    return true;
  }
  bool make_wait(stream_ref stream, detail::ordering_event handle) noexcept override {
    const std::lock_guard lock(mutex_);
    const event& e = *checked(handle, "make_wait");
    if (chance(20)) return false;  // CUDA may refuse: the resource must cope
    merge(index_of(stream.get()), e.clock);
    return true;
  }
  void recycle(detail::ordering_event handle) noexcept override {
    const std::lock_guard lock(mutex_);
    event* e = checked(handle, "recycle");
    e->recycled = true;
    try {
      spare_events_.push_back(e);
    } catch (...) {
    }
  }
  bool is_capturing(stream_ref) noexcept override { return false; }
  int current_device() noexcept override { return 0; }
  void synchronize_all_devices() override {
    const std::lock_guard lock(mutex_);
    ++synchronizations_;
    for (std::size_t stream = 0; stream < clocks_.size(); ++stream)
      completed_[stream] = std::max(completed_[stream], clocks_[stream][stream]);
  }

  // ---- what the program does --------------------------------------------------------

  /// A kernel queued on `stream`.
  void queue_work(stream_ref stream) {
    const std::lock_guard lock(mutex_);
    const std::size_t index = index_of(stream.get());
    ++clocks_[index][index];
  }
  /// The program's own cudaStreamWaitEvent: `waiting` after all work queued on `on` so far.
  void order_after(stream_ref waiting, stream_ref on) {
    const std::lock_guard lock(mutex_);
    const std::vector<std::uint64_t> clock = clock_of(index_of(on.get()));
    merge(index_of(waiting.get()), clock);
  }
  /// cudaStreamSynchronize: everything queued on `stream` so far, and what it waits for, completes.
  void synchronize(stream_ref stream) {
    const std::lock_guard lock(mutex_);
    complete(clock_of(index_of(stream.get())));
  }
  /// The GPU makes progress on one stream, as far as its waits allow.
  void progress(stream_ref stream) {
    const std::lock_guard lock(mutex_);
    const std::vector<std::uint64_t> clock = clock_of(index_of(stream.get()));
    bool ready = true;
    for (std::size_t other = 0; other < clock.size(); ++other)
      if (other != index_of(stream.get()) && completed_[other] < clock[other]) ready = false;
    if (ready) complete(clock);
  }
  /// Before the program frees `bytes` at `p` on `stream`: the work queued there
  /// so far is what any later owner must come after.
  void note_free(const void* p, std::size_t bytes, stream_ref stream) {
    if (bytes == 0) return;
    const std::lock_guard lock(mutex_);
    const auto start = address(p);
    remove_range(live_, start, start + bytes);
    const std::size_t index = index_of(stream.get());
    remove_range(freed_, start, start + bytes);
    freed_[start] = {start + bytes, index, clocks_[index][index]};
  }
  /// A block handed out for work on `stream`: what was queued before its last
  /// free must be ordered before that stream's work from now on, or complete.
  void note_handed_out(const void* p, std::size_t bytes, stream_ref stream, const char* who) {
    if (bytes == 0) return;
    const std::lock_guard lock(mutex_);
    const auto start = address(p);
    check_against_frees(start, bytes, index_of(stream.get()), who);
    if (overlaps(live_, start, start + bytes))
      violation(fmt::format("{} handed out [{:#x}, +{}) while part of it is still someone's", who, start, bytes));
    live_[start] = {start + bytes, 0, 0};
  }
  /// A block that leaves for the system on `stream` (the leaf's free): the same check.
  void note_returned_to_system(const void* p, std::size_t bytes, stream_ref stream) {
    const std::lock_guard lock(mutex_);
    const auto start = address(p);
    check_against_frees(start, bytes, index_of(stream.get()), "the leaf's free");
    if (overlaps(live_, start, start + bytes))
      violation(fmt::format("[{:#x}, +{}) went back to the system while part of it is someone's", start, bytes));
    remove_range(freed_, start, start + bytes);
  }

  [[nodiscard]] std::vector<std::string> violations() const {
    const std::lock_guard lock(mutex_);
    return violations_;
  }
  [[nodiscard]] std::size_t synchronizations() const {
    const std::lock_guard lock(mutex_);
    return synchronizations_;
  }

 private:
  struct event {
    std::vector<std::uint64_t> clock;  // per stream: work items queued before the event
    bool recycled = false;
  };
  struct range {
    std::uintptr_t end;
    std::size_t stream;      // freed_: the stream of the free
    std::uint64_t position;  // freed_: that stream's work items before the free
  };
  using range_map = std::map<std::uintptr_t, range>;

  static std::uintptr_t address(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p); }

  bool chance(unsigned one_in) { return std::uniform_int_distribution<unsigned>(1, one_in)(random_) == 1; }

  std::size_t index_of(cudaStream_t stream) {
    const auto found = std::find(streams_.begin(), streams_.end(), stream);
    if (found != streams_.end()) return static_cast<std::size_t>(found - streams_.begin());
    streams_.push_back(stream);
    for (auto& clock : clocks_) clock.push_back(0);
    clocks_.emplace_back(streams_.size(), 0);
    completed_.push_back(0);
    return streams_.size() - 1;
  }
  std::vector<std::uint64_t> clock_of(std::size_t stream) const { return clocks_[stream]; }
  void merge(std::size_t stream, const std::vector<std::uint64_t>& clock) {
    for (std::size_t other = 0; other < clock.size(); ++other)
      clocks_[stream][other] = std::max(clocks_[stream][other], clock[other]);
  }
  [[nodiscard]] bool is_complete(const std::vector<std::uint64_t>& clock) const {
    for (std::size_t stream = 0; stream < clock.size(); ++stream)
      if (completed_[stream] < clock[stream]) return false;
    return true;
  }
  void complete(const std::vector<std::uint64_t>& clock) {
    for (std::size_t stream = 0; stream < clock.size(); ++stream)
      completed_[stream] = std::max(completed_[stream], clock[stream]);
  }
  event* checked(detail::ordering_event handle, const char* call) {
    auto* e = static_cast<event*>(handle);
    if (e == nullptr || e->recycled) violation(fmt::format("{} on an event already recycled (or null)", call));
    return e;
  }
  void violation(std::string what) {
    if (violations_.size() < 20) violations_.push_back(std::move(what));
  }

  static bool overlaps(const range_map& ranges, std::uintptr_t start, std::uintptr_t end) {
    auto it = ranges.upper_bound(start);
    if (it != ranges.begin() && std::prev(it)->second.end > start) return true;
    return it != ranges.end() && it->first < end;
  }
  /// Removes [start, end) from `ranges`, keeping what lies outside it.
  static void remove_range(range_map& ranges, std::uintptr_t start, std::uintptr_t end) {
    auto it = ranges.upper_bound(start);
    if (it != ranges.begin()) --it;
    while (it != ranges.end() && it->first < end) {
      const std::uintptr_t first = it->first;
      const range kept = it->second;
      if (kept.end <= start) {
        ++it;
        continue;
      }
      it = ranges.erase(it);
      if (first < start) ranges.emplace(first, range{start, kept.stream, kept.position});
      if (kept.end > end) it = ranges.emplace(end, range{kept.end, kept.stream, kept.position}).first;
    }
  }
  void check_against_frees(std::uintptr_t start, std::size_t bytes, std::size_t to, const char* who) {
    const std::uintptr_t end = start + bytes;
    auto it = freed_.upper_bound(start);
    if (it != freed_.begin()) --it;
    for (; it != freed_.end() && it->first < end; ++it) {
      const range& freed = it->second;
      if (freed.end <= start) continue;
      const bool ordered = to == freed.stream || clocks_[to][freed.stream] >= freed.position ||
                           completed_[freed.stream] >= freed.position;
      if (!ordered)
        violation(fmt::format("{} gave [{:#x}, +{}) to stream {} before the {} work items stream {} queued "
                              "before freeing [{:#x}, {:#x}) were ordered before it (it waited for {}, {} "
                              "completed)",
                              who, start, bytes, to, freed.position, freed.stream, it->first, freed.end,
                              clocks_[to][freed.stream], completed_[freed.stream]));
    }
    remove_range(freed_, start, end);
  }

  mutable std::mutex mutex_;
  std::mt19937_64 random_;
  std::vector<cudaStream_t> streams_;
  std::vector<std::vector<std::uint64_t>> clocks_;  // per stream, a vector clock
  std::vector<std::uint64_t> completed_;            // per stream, work items completed
  std::vector<std::unique_ptr<event>> events_;
  std::vector<event*> spare_events_;
  range_map freed_;  // the last free of each byte not since handed out
  range_map live_;   // blocks handed out and not yet freed
  std::vector<std::string> violations_;
  std::size_t synchronizations_ = 0;
};

/// A leaf over host memory whose frees the model checks: memory that leaves
/// for the system must be ordered after its last user's work. Pageable, so
/// nothing here makes a CUDA call; a capacity makes the stack above run out.
class model_leaf final : public stream_ordered_resource {
 public:
  model_leaf(stream_order_model& model, std::size_t capacity, cudaStream_t bound)
      : stream_ordered_resource(memory_kind::pageable, -1), model_(model), capacity_(capacity), bound_(bound) {}
  [[nodiscard]] std::string description() const override { return "model_leaf"; }
  [[nodiscard]] std::size_t used_bytes() const noexcept { return used_.load(); }

 private:
  [[nodiscard]] stream_ref do_bound_stream() const noexcept override { return stream_ref(bound_); }
  void* do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref) override {
    if (bytes == 0) return nullptr;
    const std::size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    if (used_.fetch_add(rounded) + rounded > capacity_) {
      used_.fetch_sub(rounded);
      throw out_of_memory(bytes, alignment, description(), fmt::format("past its capacity of {} bytes", capacity_));
    }
    void* p = std::aligned_alloc(std::max(alignment, alignof(std::max_align_t)), rounded);
    if (p == nullptr) {
      used_.fetch_sub(rounded);
      throw std::bad_alloc();
    }
    return p;
  }
  void do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept override {
    try {
      model_.note_returned_to_system(p, bytes, stream);
    } catch (...) {
    }
    used_.fetch_sub((bytes + alignment - 1) / alignment * alignment);
    std::free(p);
  }

  stream_order_model& model_;
  const std::size_t capacity_;
  const cudaStream_t bound_;
  std::atomic<std::size_t> used_{0};
};

}  // namespace cudapmr::test
