// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file limiting_adaptor.hpp
/// A byte cap on what may be outstanding from an upstream resource at once.

#include "cudapmr/adaptors/resource_adaptor.hpp"

#include <atomic>
#include <cstddef>
#include <string>

namespace cudapmr {

/// Refuses any allocation that would bring the bytes outstanding through it
/// past a cap: a request succeeds while `used + bytes <= cap`. Bytes count as
/// requested, whatever the upstream rounds them up to; zero bytes always
/// succeed. Thread-safe and lock-free: concurrent callers never overshoot.
class limiting_adaptor final : public resource_adaptor {
 public:
  /// At most `cap` bytes outstanding from `upstream`, which must outlive the adaptor.
  limiting_adaptor(stream_ordered_resource& upstream, std::size_t cap) noexcept
      : resource_adaptor(upstream), cap_(cap) {}

  /// The most bytes that may be outstanding at once.
  [[nodiscard]] std::size_t cap() const noexcept { return cap_; }
  /// Bytes outstanding now.
  [[nodiscard]] std::size_t used_bytes() const noexcept { return used_.load(std::memory_order_relaxed); }

  /// "limiting_adaptor (cap 1073741824 bytes) over <upstream>".
  [[nodiscard]] std::string description() const override;

 private:
  void do_report(resource_state& state) const override;
  /// \throws out_of_memory naming the cap, the usage and the request when
  /// the cap would be passed; whatever the upstream throws otherwise.
  void* do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) override;
  void do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept override;

  std::size_t cap_;
  std::atomic<std::size_t> used_{0};
};

}  // namespace cudapmr
