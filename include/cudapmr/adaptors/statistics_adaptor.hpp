// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file statistics_adaptor.hpp
/// Current, peak and total usage of a resource, overall and per stream, with
/// lock-free counters cheap enough to leave on.

#include "cudapmr/adaptors/resource_adaptor.hpp"
#include "cudapmr/resource_state.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cudapmr {

/// The counters of the events that were ordered on one stream.
struct stream_statistics {
  stream_ref stream;
  resource_statistics statistics;
};

struct statistics_options {
  /// Keep counters per stream too; off, each call costs half the atomic operations.
  bool per_stream = true;
};

namespace detail {
/// Lock-free counters: relaxed atomic additions, plus a compare-exchange only
/// when a peak is actually raised.
struct alignas(64) atomic_statistics {
  std::atomic<std::int64_t> bytes_current{0}, bytes_peak{0}, bytes_total{0};
  std::atomic<std::int64_t> allocations_current{0}, allocations_peak{0}, allocations_total{0};

  void add(std::int64_t bytes) noexcept;
  void remove(std::int64_t bytes) noexcept;
  void reset_peak() noexcept;
  [[nodiscard]] resource_statistics snapshot() const noexcept;
};

/// Per-stream counters in a fixed open-addressing table: a stream claims its
/// slot once with a compare-exchange; lookups never lock.
class stream_statistics_table {
 public:
  /// How many distinct streams get counters of their own; later ones share one.
  static constexpr std::size_t capacity = 256;

  stream_statistics_table();
  /// The counters of `stream`, claiming a slot on first use.
  [[nodiscard]] atomic_statistics& find(stream_ref stream) noexcept;
  [[nodiscard]] const atomic_statistics* find_existing(stream_ref stream) const noexcept;
  [[nodiscard]] std::vector<stream_statistics> snapshot() const;
  [[nodiscard]] const atomic_statistics& overflow() const noexcept { return overflow_; }
  void reset_peaks() noexcept;

 private:
  struct slot {
    std::atomic<std::uintptr_t> key;
    atomic_statistics counters;
  };
  std::unique_ptr<slot[]> slots_;
  atomic_statistics overflow_;
};
}  // namespace detail

/// Counts what passes through it to an upstream resource: bytes and
/// allocations, current, peak and total, overall and per stream.
///
/// Each allocation costs a few relaxed atomic additions (twice that with
/// per-stream counters) and no lock; each deallocation, half that. Events are
/// counted against the stream they are ordered on (the bound stream for the
/// pmr calls). Thread-safe.
class statistics_adaptor final : public resource_adaptor {
 public:
  /// Counts what passes through to `upstream`, which must outlive the adaptor.
  /// \throws std::bad_alloc (for the per-stream table) only.
  explicit statistics_adaptor(stream_ordered_resource& upstream, statistics_options options = {});

  /// Counters over every stream.
  [[nodiscard]] resource_statistics statistics() const noexcept { return overall_.snapshot(); }
  /// Counters of the events ordered on `stream`; zeros for a stream never seen
  /// (and for every stream when per-stream counting is off).
  [[nodiscard]] resource_statistics statistics(stream_ref stream) const noexcept;
  /// Whether counters are kept per stream too (statistics_options::per_stream).
  [[nodiscard]] bool counts_per_stream() const noexcept { return streams_ != nullptr; }
  /// Counters of every stream seen (in no particular order); empty when
  /// per-stream counting is off.
  [[nodiscard]] std::vector<stream_statistics> per_stream() const;
  /// Counters shared by the streams seen after `capacity` distinct ones.
  [[nodiscard]] resource_statistics other_streams() const noexcept;
  /// Sets every peak to its current value, overall and per stream.
  void reset_peak() noexcept;

  [[nodiscard]] std::string description() const override { return describe_as("statistics_adaptor"); }

 private:
  void* do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) override;
  void do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept override;
  void do_report(resource_state& state) const override;

  detail::atomic_statistics overall_;
  std::unique_ptr<detail::stream_statistics_table> streams_;  // null when per-stream counting is off
};

}  // namespace cudapmr
