// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/adaptors/history_adaptor.hpp"

#include "cudapmr/detail/call_stack.hpp"
#include "cudapmr/device.hpp"
#include "cudapmr/detail/thread_ordinal.hpp"
#include "cudapmr/error.hpp"
#include "cudapmr/memory_snapshot.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <stdexcept>
#include <utility>

namespace cudapmr {
namespace {

/// A slot's stamp: odd while ticket `t` is written, `2t + 2` once it is published.
constexpr std::uint64_t writing(std::uint64_t ticket) noexcept { return 2 * ticket + 1; }
constexpr std::uint64_t published(std::uint64_t ticket) noexcept { return 2 * ticket + 2; }

/// `options` once each limit is checked: with them, the ring's size is a power
/// of two that `bit_ceil` can give, and its frames count fits in a size_t.
history_options validated(const history_options& options) {
  if (options.capacity > history_options::max_capacity)
    throw std::invalid_argument(fmt::format("history_options::capacity of {} events is past the most, {} (2^32)",
                                            options.capacity, history_options::max_capacity));
  if (options.call_stack_depth > history_options::max_call_stack_depth)
    throw std::invalid_argument(fmt::format("history_options::call_stack_depth of {} frames is past the most, {}",
                                            options.call_stack_depth, history_options::max_call_stack_depth));
  return options;
}

}  // namespace

/// One event, in relaxed atomics so that a reader racing a writer reads
/// torn values (and then discards them by the stamp) without a data race.
struct history_adaptor::slot {
  std::atomic<std::uint64_t> stamp{0};
  std::atomic<std::uint64_t> time_ns{0};
  std::atomic<std::uint64_t> thread{0};
  std::atomic<std::uintptr_t> pointer{0};
  std::atomic<std::size_t> bytes{0};
  std::atomic<std::size_t> alignment{0};
  std::atomic<std::uintptr_t> stream{0};
  /// The action, and the call stack's depth above the low byte.
  std::atomic<std::uint32_t> action_and_depth{0};
};

std::string_view to_string(history_action action) noexcept {
  switch (action) {
    case history_action::allocate: return "allocate";
    case history_action::free: return "free";
    case history_action::free_completed: return "free_completed";
    case history_action::out_of_memory: return "out_of_memory";
  }
  return "unknown";
}

history_adaptor::history_adaptor(stream_ordered_resource& upstream, history_options options)
    : resource_adaptor(upstream),
      options_(validated(options)),
      mask_(std::bit_ceil(std::max<std::size_t>(options_.capacity, 2)) - 1),
      frames_per_slot_(options_.capture_call_stacks ? options_.call_stack_depth : 0),
      slots_(std::make_unique<slot[]>(mask_ + 1)) {
  if (frames_per_slot_ != 0) frames_ = std::make_unique<std::atomic<void*>[]>((mask_ + 1) * frames_per_slot_);
  if (frames_per_slot_ != 0) detail::call_stack_capturers.fetch_add(1, std::memory_order_relaxed);
}

history_adaptor::~history_adaptor() {
  if (frames_per_slot_ != 0) detail::call_stack_capturers.fetch_sub(1, std::memory_order_relaxed);
}

std::uint64_t history_adaptor::dropped() const noexcept {
  const std::uint64_t total = recorded();
  return total > capacity() ? total - capacity() : 0;
}

void history_adaptor::record(history_action action, void* p, std::size_t bytes, std::size_t alignment,
                             stream_ref stream, const std::vector<void*>* call_stack,
                             std::uint64_t device_free) noexcept {
  const std::uint64_t ticket = next_ticket_.fetch_add(1, std::memory_order_relaxed);
  const std::size_t index = static_cast<std::size_t>(ticket) & mask_;
  slot& entry = slots_[index];
  entry.stamp.store(writing(ticket), std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  std::size_t depth = 0;
  if (call_stack != nullptr && frames_) {
    depth = std::min(call_stack->size(), frames_per_slot_);
    std::atomic<void*>* frames = &frames_[index * frames_per_slot_];
    for (std::size_t i = 0; i < depth; ++i) frames[i].store((*call_stack)[i], std::memory_order_relaxed);
  }
  entry.time_ns.store(history_clock_ns(), std::memory_order_relaxed);
  entry.thread.store(detail::thread_ordinal(), std::memory_order_relaxed);
  entry.pointer.store(action == history_action::out_of_memory ? device_free : reinterpret_cast<std::uintptr_t>(p),
                      std::memory_order_relaxed);
  entry.bytes.store(bytes, std::memory_order_relaxed);
  entry.alignment.store(alignment, std::memory_order_relaxed);
  entry.stream.store(reinterpret_cast<std::uintptr_t>(stream.get()), std::memory_order_relaxed);
  entry.action_and_depth.store(static_cast<std::uint32_t>(action) | static_cast<std::uint32_t>(depth << 8),
                               std::memory_order_relaxed);
  entry.stamp.store(published(ticket), std::memory_order_release);
}

std::vector<history_event> history_adaptor::events() const {
  const std::uint64_t end = recorded();
  const std::uint64_t begin = end > capacity() ? end - capacity() : 0;
  std::vector<history_event> events;
  events.reserve(static_cast<std::size_t>(end - begin));
  for (std::uint64_t ticket = begin; ticket < end; ++ticket) {
    const std::size_t index = static_cast<std::size_t>(ticket) & mask_;
    const slot& entry = slots_[index];
    const std::uint64_t stamp = entry.stamp.load(std::memory_order_acquire);
    if (stamp != published(ticket)) continue;  // still being written, or already rewritten
    history_event event;
    const std::uint32_t action_and_depth = entry.action_and_depth.load(std::memory_order_relaxed);
    event.action = static_cast<history_action>(action_and_depth & 0xff);
    event.sequence = ticket + 1;
    event.time_ns = entry.time_ns.load(std::memory_order_relaxed);
    event.thread = entry.thread.load(std::memory_order_relaxed);
    const std::uintptr_t pointer_word = entry.pointer.load(std::memory_order_relaxed);
    if (event.action != history_action::out_of_memory) event.pointer = reinterpret_cast<void*>(pointer_word);
    else if (pointer_word != unknown_device_free) event.device_free_bytes = pointer_word;
    event.bytes = entry.bytes.load(std::memory_order_relaxed);
    event.alignment = entry.alignment.load(std::memory_order_relaxed);
    event.stream = stream_ref(reinterpret_cast<cudaStream_t>(entry.stream.load(std::memory_order_relaxed)));
    const std::size_t depth = std::min<std::size_t>(action_and_depth >> 8, frames_per_slot_);
    for (std::size_t i = 0; i < depth; ++i)
      event.call_stack.push_back(frames_[index * frames_per_slot_ + i].load(std::memory_order_relaxed));
    std::atomic_thread_fence(std::memory_order_acquire);
    if (entry.stamp.load(std::memory_order_relaxed) != stamp) continue;  // rewritten while read
    events.push_back(std::move(event));
  }
  return events;
}

std::uint64_t history_adaptor::device_free_now() const noexcept {
  if ((kind() != memory_kind::device && kind() != memory_kind::managed) || device_id() < 0) return unknown_device_free;
  return device::free_memory_if_known(device_id()).value_or(unknown_device_free);
}

void* history_adaptor::do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) {
  std::vector<void*> call_stack;
  if (frames_per_slot_ != 0)
    call_stack = detail::capture_call_stack(static_cast<int>(frames_per_slot_));
  void* p = nullptr;
  try {
    p = upstream_resource().allocate_async(bytes, alignment, stream);
  } catch (const out_of_memory& refusal) {
    record(history_action::out_of_memory, nullptr, bytes, alignment, stream, &call_stack, device_free_now());
    if (refusal.report() != nullptr) throw;  // explained below already
    if (explained_.fetch_add(1, std::memory_order_relaxed) >= options_.explained_refusals) throw;
    std::shared_ptr<const out_of_memory_report> report;
    try {
      report = std::make_shared<const out_of_memory_report>(explain_out_of_memory(*this, bytes, alignment, stream));
    } catch (...) {
      throw refusal;  // no memory to explain it: the refusal as it came
    }
    throw out_of_memory(refusal, std::move(report));
  }
  if (p != nullptr) record(history_action::allocate, p, bytes, alignment, stream, &call_stack);
  return p;
}

void history_adaptor::do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment,
                                          stream_ref stream) noexcept {
  // Recorded before the upstream frees, so that a pointer is always freed in
  // the history before another thread is given it again.
  record(history_action::free, p, bytes, alignment, stream, nullptr);
  upstream_resource().deallocate_async(p, bytes, alignment, stream);
  if (kind() == memory_kind::pageable) record(history_action::free_completed, p, bytes, alignment, stream, nullptr);
}

void history_adaptor::annotate(std::string_view name, annotation_stage stage) {
  history_annotation mark{std::string(name), stage, history_clock_ns(), detail::thread_ordinal()};
  const std::lock_guard lock(annotations_mutex_);
  if (options_.annotation_capacity == 0) return;
  if (annotations_.size() >= options_.annotation_capacity) annotations_.pop_front();
  annotations_.push_back(std::move(mark));
}

void history_adaptor::annotate_begin(std::string_view name) { annotate(name, annotation_stage::begin); }
void history_adaptor::annotate_end(std::string_view name) { annotate(name, annotation_stage::end); }

std::vector<history_annotation> history_adaptor::annotations() const {
  const std::lock_guard lock(annotations_mutex_);
  return {annotations_.begin(), annotations_.end()};
}

}  // namespace cudapmr
