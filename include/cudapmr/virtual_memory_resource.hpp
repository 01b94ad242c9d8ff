// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file virtual_memory_resource.hpp
/// Device memory from the driver's virtual memory management calls: an
/// address range reserved once (and, with the default reservation, more where
/// fragmentation needs them), physical memory mapped into it per allocation
/// and unmapped once the work queued before its free is done.

#include "cudapmr/stream.hpp"
#include "cudapmr/stream_ordered_resource.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace cudapmr {

namespace detail {
class address_ranges;
}  // namespace detail

/// How a virtual_memory_resource reserves and creates its memory.
struct virtual_memory_options {
  /// Bytes of address space reserved at construction, rounded up to the
  /// allocation granularity: what is live and what waits to be unmapped must
  /// fit in it. 0: 1.125 times the device's memory, and another range as
  /// large wherever what is live leaves no free range that fits a request,
  /// given back once nothing is mapped in it: address space costs nothing
  /// until mapped, and a single range, fragmented, could refuse a large
  /// request with most of the device free. (Only where the driver reserves
  /// no more address space is such a request refused after all.)
  std::size_t reserve_bytes = 0;
  /// Ask for a POSIX file descriptor handle type at each cuMemCreate, so that
  /// `export_handle` works; where the driver refuses it, allocations are made
  /// without (and `is_exportable()` says so).
  bool exportable = true;
  /// Mark allocations GPUDirect RDMA capable where the device supports it with
  /// virtual memory management.
  bool rdma = true;
};

/// Device memory of one GPU on the driver's virtual memory calls. At
/// construction it reserves one address range (more later, see
/// `virtual_memory_options::reserve_bytes`); each allocation, rounded up
/// to the granularity (2 MiB on H100/H200), is one physical allocation (or
/// several taken over, below) mapped at the lowest free address that fits,
/// readable and writable by its device. Exportable allocations are always one.
///
/// Frees never wait for the device: `deallocate_async` records an event on
/// the stream and the pages stay mapped until that event has completed; they
/// are unmapped at that free if the stream has nothing left to run, else at a
/// later allocation or free, `trim`, `release_completed()` or `release()`.
/// An allocation on a stream takes over the physical memory of frees on that
/// stream whose work is still queued (largest first, up to its size) and
/// maps it, with new memory for the rest, at its own address: a working set
/// that grows on one stream holds its pages once, not its old ones as well
/// until their work is done. So in a leaf that is not exportable every
/// allocation is stream-ordered, as `cudaMallocAsync`'s: usable in its
/// stream's order, and another stream (a free on another stream too) must be
/// ordered after that stream first. An exportable leaf takes nothing over and
/// its allocations are usable at once by any stream. Where
/// the device (or the reservation) is full, pending frees are waited for (per
/// event, on the host) and unmapped before the request is refused, and so are
/// frees another thread is unmapping (`release()` included) at that moment.
///
/// Stream capture: the driver's virtual memory calls neither fail nor
/// invalidate a capture, on this thread or another, so allocating while a
/// stream is captured is allowed; the graph keeps the address, which stays
/// mapped until `release()` or destruction, wherever it is freed: a graph
/// launched again writes there again. A free on a captured stream cannot be
/// ordered by an event either: that range too waits for `release()`.
///
/// Thread-safe. Equal only to itself.
class virtual_memory_resource final : public stream_ordered_resource {
 public:
  /// Reserves the first address range on `device`.
  /// \throws std::invalid_argument for a bad ordinal or a `reserve_bytes`
  ///   below the granularity; cuda_error where no device exists, where the
  ///   device has no virtual memory management, or where the reservation is refused.
  explicit virtual_memory_resource(int device, virtual_memory_options options = {});
  /// Waits for the pending frees' events, synchronizes the device where frees
  /// on captured streams are held (as `release()`), unmaps everything and
  /// frees the reserved ranges. Memory still allocated from it is unmapped too:
  /// destroy it only once nothing uses its memory. Never throws.
  ~virtual_memory_resource() override;

  /// Physical bytes held now: live allocations and frees not yet unmapped
  /// (memory taken over by a later allocation counts once, there).
  [[nodiscard]] std::size_t mapped_bytes() const noexcept { return mapped_.load(std::memory_order_relaxed); }
  /// The most `mapped_bytes()` has been.
  [[nodiscard]] std::size_t mapped_bytes_high() const noexcept { return mapped_high_.load(std::memory_order_relaxed); }
  /// Bytes handed out and not freed, each allocation rounded to the granularity.
  [[nodiscard]] std::size_t allocated_bytes() const noexcept { return allocated_.load(std::memory_order_relaxed); }
  /// Physical bytes freed but still held: waiting for their event, or held
  /// after a free on a captured stream (memory taken over is no longer counted here).
  [[nodiscard]] std::size_t pending_bytes() const noexcept { return pending_.load(std::memory_order_relaxed); }
  /// How many ranges are mapped now: live allocations and frees not yet unmapped.
  [[nodiscard]] std::size_t mappings() const noexcept { return mappings_.load(std::memory_order_relaxed); }
  /// The address space reserved: the first range and any added since.
  [[nodiscard]] std::size_t reserved_address_bytes() const noexcept {
    return reserved_bytes_.load(std::memory_order_relaxed);
  }
  /// How many address ranges are reserved now (more than 1 only with the
  /// default `reserve_bytes`, while something is mapped in an added range).
  [[nodiscard]] std::size_t address_reservations() const;
  /// The allocation granularity (recommended) every allocation is rounded to.
  [[nodiscard]] std::size_t granularity() const noexcept { return granularity_; }
  /// Whether allocations carry the POSIX file descriptor handle type (asked
  /// for and, so far, accepted by the driver).
  [[nodiscard]] bool is_exportable() const noexcept { return exportable_.load(std::memory_order_relaxed); }
  /// Whether allocations are marked GPUDirect RDMA capable.
  [[nodiscard]] bool is_rdma_capable() const noexcept { return rdma_; }

  /// Waits, on the host and per event (never for the whole device), for the
  /// work queued before each pending free, then unmaps those ranges.
  /// Frees on captured streams stay held. \throws cuda_error where a wait
  /// fails; the ranges not yet unmapped then stay pending.
  void release_completed();
  /// Unmaps the freed ranges whose work has completed; never waits.
  void unmap_completed() noexcept;
  /// Whether a freed range waits for work queued before its free (a range
  /// freed during a capture waits for `release()` instead and does not count).
  [[nodiscard]] bool has_frees_waiting_on_work() const noexcept;
  /// Synchronizes the device, then unmaps every freed range, those freed on
  /// captured streams included. Call it once no graph that used them will
  /// replay, and not while a stream of the device is being captured (the
  /// synchronize would break that capture).
  /// \throws cuda_error if the synchronize fails; the ranges then stay held.
  void release();

  /// A POSIX file descriptor through which another process (or this one) can
  /// import the physical allocation at `p`, and that allocation's size; the
  /// caller owns the descriptor and closes it.
  struct exported_handle {
    int descriptor = -1;
    std::size_t bytes = 0;
  };
  /// Exports the allocation that starts at `p`, which this resource handed out.
  /// \throws std::invalid_argument where `p` is not the start of a live
  ///   allocation of this resource; cuda_error where the allocation was made
  ///   without the POSIX file descriptor handle type or the driver refuses.
  [[nodiscard]] exported_handle export_handle(const void* p) const;

  [[nodiscard]] std::string description() const override;

 private:
  struct piece;
  struct freed_range;
  struct book;  // what is mapped and what is freed, under mutex_
  struct unmap_batch;

  [[nodiscard]] stream_ref do_bound_stream() const noexcept override { return bound_stream_.ref(); }
  void* do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) override;
  void do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept override;
  /// Unmaps every pending free once its event has completed (`release_completed`).
  void do_trim(stream_ref stream) override;
  void do_report(resource_state& report) const override;

  /// Maps `bytes` (a granularity multiple) at an address aligned to
  /// `alignment`, for an allocation on `stream`: pieces taken over from frees
  /// on it first (not during a capture, nor where exportable), then one created for the rest.
  [[nodiscard]] void* map_new(std::size_t bytes, std::size_t alignment, std::size_t requested, stream_ref stream);
  /// Takes the physical memory of pending frees made on `stream` (largest
  /// first, at most `bytes` of it) from their ranges, which then only unmap.
  [[nodiscard]] std::vector<piece> take_over_pending(stream_ref stream, std::size_t bytes) noexcept;
  /// Unmaps the pending frees whose events have completed; where `wait`,
  /// waits for the others' events first. \throws cuda_error where a wait fails.
  void unmap_pending(bool wait);
  /// Unmaps `freed` (ranges already out of every list) and gives their addresses back.
  void unmap(std::vector<freed_range>& freed) noexcept;
  /// `bytes` of address space aligned to `alignment` from a range reserved
  /// now, as large as the first: where what is live leaves no free range that
  /// fits. None where the driver has no address space left. With mutex_ held.
  /// \throws cuda_error for another refusal of the reservation.
  [[nodiscard]] std::optional<std::uintptr_t> take_from_another_range(std::size_t bytes, std::size_t alignment);
  /// Frees the ranges added since construction that nothing is mapped in. With mutex_ held.
  void free_empty_ranges() noexcept;
  /// Throws out_of_memory for `requested` bytes, whose `bytes` of address
  /// space no reserved range fits, naming the ranges. With mutex_ held.
  [[noreturn]] void refuse_address_space(std::size_t bytes, std::size_t alignment, std::size_t requested) const;

  stream bound_stream_;
  std::size_t granularity_ = 0;
  std::size_t first_range_bytes_ = 0;  // the constructor's reservation; no request is larger
  bool grows_ = false;                 // reserve_bytes was 0: more ranges where fragmentation needs them
  std::atomic<std::size_t> reserved_bytes_{0};
  bool rdma_ = false;
  std::atomic<bool> exportable_{false};
  std::atomic<std::size_t> mapped_{0};
  std::atomic<std::size_t> mapped_high_{0};
  std::atomic<std::size_t> allocated_{0};
  std::atomic<std::size_t> pending_{0};
  std::atomic<std::size_t> mappings_{0};
  mutable std::mutex mutex_;  // guards state_; never held across a call that can wait for the GPU
  std::unique_ptr<book> book_;
};

}  // namespace cudapmr
