// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file host_memory_resource.hpp
/// Pageable host memory behind the stream-ordered interface, for tests and for
/// running adaptor logic on machines without a GPU.

#include "cudapmr/stream_ordered_resource.hpp"

#include <atomic>
#include <cstddef>
#include <limits>
#include <string>

namespace cudapmr {

/// Ordinary host memory from the global aligned `operator new`. Stream
/// arguments are accepted and ignored: every call completes before it returns.
/// An optional capacity makes exhaustion reproducible. Thread-safe.
class host_memory_resource final : public stream_ordered_resource {
 public:
  /// \param capacity the most bytes outstanding at once; past it, out_of_memory.
  explicit host_memory_resource(std::size_t capacity = std::numeric_limits<std::size_t>::max()) noexcept
      : stream_ordered_resource(memory_kind::pageable, -1), capacity_(capacity) {}

  /// Bytes currently handed out.
  [[nodiscard]] std::size_t used_bytes() const noexcept { return used_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

  [[nodiscard]] std::string description() const override;

 private:
  /// The null stream; never synchronized, since nothing here is asynchronous.
  [[nodiscard]] stream_ref do_bound_stream() const noexcept override { return stream_ref{cudaStream_t{}}; }
  void* do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) override;
  void do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept override;
  void do_report(resource_state& state) const override;

  std::size_t capacity_;
  std::atomic<std::size_t> used_{0};
};

}  // namespace cudapmr
