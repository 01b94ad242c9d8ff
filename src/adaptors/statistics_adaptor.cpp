// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/adaptors/statistics_adaptor.hpp"

#include <limits>

namespace cudapmr {
namespace detail {
namespace {

constexpr std::uintptr_t empty_key = std::numeric_limits<std::uintptr_t>::max();

std::uintptr_t key_of(stream_ref stream) noexcept { return reinterpret_cast<std::uintptr_t>(stream.get()); }

/// Stream handles are pointers with their low bits clear; mix before taking the slot.
std::size_t home_slot(std::uintptr_t key) noexcept {
  std::uint64_t mixed = static_cast<std::uint64_t>(key);
  mixed ^= mixed >> 33;
  mixed *= 0xff51afd7ed558ccdULL;
  mixed ^= mixed >> 33;
  return static_cast<std::size_t>(mixed % stream_statistics_table::capacity);
}

/// Raises `peak` to `value` unless it is already at least that high.
void raise_peak(std::atomic<std::int64_t>& peak, std::int64_t value) noexcept {
  std::int64_t seen = peak.load(std::memory_order_relaxed);
  while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

}  // namespace

void atomic_statistics::add(std::int64_t bytes) noexcept {
  raise_peak(bytes_peak, bytes_current.fetch_add(bytes, std::memory_order_relaxed) + bytes);
  raise_peak(allocations_peak, allocations_current.fetch_add(1, std::memory_order_relaxed) + 1);
  bytes_total.fetch_add(bytes, std::memory_order_relaxed);
  allocations_total.fetch_add(1, std::memory_order_relaxed);
}

void atomic_statistics::remove(std::int64_t bytes) noexcept {
  bytes_current.fetch_sub(bytes, std::memory_order_relaxed);
  allocations_current.fetch_sub(1, std::memory_order_relaxed);
}

void atomic_statistics::reset_peak() noexcept {
  bytes_peak.store(bytes_current.load(std::memory_order_relaxed), std::memory_order_relaxed);
  allocations_peak.store(allocations_current.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

resource_statistics atomic_statistics::snapshot() const noexcept {
  return {{bytes_current.load(std::memory_order_relaxed), bytes_peak.load(std::memory_order_relaxed),
           bytes_total.load(std::memory_order_relaxed)},
          {allocations_current.load(std::memory_order_relaxed), allocations_peak.load(std::memory_order_relaxed),
           allocations_total.load(std::memory_order_relaxed)}};
}

stream_statistics_table::stream_statistics_table() : slots_(new slot[capacity]) {
  for (std::size_t i = 0; i < capacity; ++i) slots_[i].key.store(empty_key, std::memory_order_relaxed);
}

atomic_statistics& stream_statistics_table::find(stream_ref stream) noexcept {
  const std::uintptr_t key = key_of(stream);
  const std::size_t home = home_slot(key);
  for (std::size_t probe = 0; probe < capacity; ++probe) {
    slot& candidate = slots_[(home + probe) % capacity];
    std::uintptr_t seen = candidate.key.load(std::memory_order_acquire);
    if (seen == key) return candidate.counters;
    if (seen == empty_key) {
      if (candidate.key.compare_exchange_strong(seen, key, std::memory_order_acq_rel)) return candidate.counters;
      if (seen == key) return candidate.counters;  // another thread claimed it for the same stream
    }
  }
  return overflow_;
}

const atomic_statistics* stream_statistics_table::find_existing(stream_ref stream) const noexcept {
  const std::uintptr_t key = key_of(stream);
  const std::size_t home = home_slot(key);
  for (std::size_t probe = 0; probe < capacity; ++probe) {
    const slot& candidate = slots_[(home + probe) % capacity];
    const std::uintptr_t seen = candidate.key.load(std::memory_order_acquire);
    if (seen == key) return &candidate.counters;
    if (seen == empty_key) return nullptr;  // slots are never released, so the probe ends here
  }
  return nullptr;
}

std::vector<stream_statistics> stream_statistics_table::snapshot() const {
  std::vector<stream_statistics> streams;
  for (std::size_t i = 0; i < capacity; ++i) {
    const std::uintptr_t key = slots_[i].key.load(std::memory_order_acquire);
    if (key != empty_key)
      streams.push_back({stream_ref(reinterpret_cast<cudaStream_t>(key)), slots_[i].counters.snapshot()});
  }
  return streams;
}

void stream_statistics_table::reset_peaks() noexcept {
  for (std::size_t i = 0; i < capacity; ++i) slots_[i].counters.reset_peak();
  overflow_.reset_peak();
}

}  // namespace detail

statistics_adaptor::statistics_adaptor(stream_ordered_resource& upstream, statistics_options options)
    : resource_adaptor(upstream),
      streams_(options.per_stream ? std::make_unique<detail::stream_statistics_table>() : nullptr) {}

resource_statistics statistics_adaptor::statistics(stream_ref stream) const noexcept {
  const detail::atomic_statistics* counters = streams_ ? streams_->find_existing(stream) : nullptr;
  return counters != nullptr ? counters->snapshot() : resource_statistics{};
}

std::vector<stream_statistics> statistics_adaptor::per_stream() const {
  return streams_ ? streams_->snapshot() : std::vector<stream_statistics>{};
}

resource_statistics statistics_adaptor::other_streams() const noexcept {
  return streams_ ? streams_->overflow().snapshot() : resource_statistics{};
}

void statistics_adaptor::reset_peak() noexcept {
  overall_.reset_peak();
  if (streams_) streams_->reset_peaks();
}

void statistics_adaptor::do_report(resource_state& state) const {
  state.statistics = statistics();
  state.used_bytes = static_cast<std::size_t>(std::max<std::int64_t>(state.statistics->bytes.current, 0));
  state.peak_used_bytes = static_cast<std::size_t>(std::max<std::int64_t>(state.statistics->bytes.peak, 0));
}

void* statistics_adaptor::do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) {
  void* p = upstream_resource().allocate_async(bytes, alignment, stream);
  if (p == nullptr) return p;  // zero bytes: never handed back, so never counted
  const auto signed_bytes = static_cast<std::int64_t>(bytes);
  overall_.add(signed_bytes);
  if (streams_) streams_->find(stream).add(signed_bytes);
  return p;
}

void statistics_adaptor::do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment,
                                             stream_ref stream) noexcept {
  // Counted before the upstream frees, so that a thread that reuses the memory
  // at once never sees it counted twice.
  const auto signed_bytes = static_cast<std::int64_t>(bytes);
  overall_.remove(signed_bytes);
  if (streams_) streams_->find(stream).remove(signed_bytes);
  upstream_resource().deallocate_async(p, bytes, alignment, stream);
}

}  // namespace cudapmr
