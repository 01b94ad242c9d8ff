// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file nccl/memory_resource.hpp
/// Device memory from NCCL's allocator (part of cudapmr::nccl, built where NCCL is found).

#include "cudapmr/stream.hpp"
#include "cudapmr/stream_ordered_resource.hpp"

#include <cstddef>
#include <string>

namespace cudapmr {

/// Device memory of one GPU from `ncclMemAlloc`: memory NCCL can register with
/// a communicator (nccl_registration) for its zero-copy and NVLink SHARP
/// paths, already accessible from every peer device that can reach it.
///
/// NCCL's allocator is synchronous, so stream ordering is kept thus:
/// `allocate_async` returns memory usable at once by any stream (more than
/// stream order promises); `deallocate_async` first waits for the work queued
/// on its stream so far, which may still use the memory, then frees it.
/// Allocations are rounded up to NCCL's granularity (2 MiB or more), so this
/// suits large, long-lived communication buffers, not small temporaries.
/// Thread-safe. Two such resources are equal when they serve the same device.
class nccl_memory_resource final : public stream_ordered_resource {
 public:
  /// \throws std::invalid_argument for an ordinal out of range; cuda_error where no device exists.
  explicit nccl_memory_resource(int device);

  /// "nccl_memory_resource (device 0)".
  [[nodiscard]] std::string description() const override;

 private:
  [[nodiscard]] stream_ref do_bound_stream() const noexcept override { return bound_stream_.ref(); }
  void* do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) override;
  void do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept override;
  [[nodiscard]] bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override;

  stream bound_stream_;
};

}  // namespace cudapmr
