// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file failure_callback_adaptor.hpp
/// A second chance on exhaustion: a user callback may free, trim or spill
/// memory and ask for the allocation to be tried again.

#include "cudapmr/adaptors/resource_adaptor.hpp"
#include "cudapmr/error.hpp"

#include <cstddef>
#include <functional>
#include <string>

namespace cudapmr {

/// What the callback is told about a refused allocation.
struct allocation_failure {
  std::size_t bytes;
  std::size_t alignment;
  stream_ref stream;
  /// 1 for the first refusal of this request, 2 after one retry, and so on.
  std::size_t attempt;
  /// The upstream's refusal.
  const out_of_memory& error;
};

/// Returns true to have the allocation tried again (after freeing or trimming
/// something), false to let the `out_of_memory` through. It runs on the
/// allocating thread, possibly on several threads at once, and must not
/// allocate from the same adaptor.
using failure_callback = std::function<bool(const allocation_failure&)>;

/// Calls a callback whenever the upstream runs out of memory and retries for
/// as long as the callback says so. Thread-safe if the callback is.
class failure_callback_adaptor final : public resource_adaptor {
 public:
  /// \throws std::invalid_argument if `callback` is empty.
  failure_callback_adaptor(stream_ordered_resource& upstream, failure_callback callback);

  [[nodiscard]] std::string description() const override { return describe_as("failure_callback_adaptor"); }

 private:
  /// \throws the upstream's last out_of_memory once the callback declines to
  ///   retry; whatever the callback throws; any other upstream error at once.
  void* do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) override;
  void do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept override {
    upstream_resource().deallocate_async(p, bytes, alignment, stream);
  }

  failure_callback callback_;
};

}  // namespace cudapmr
