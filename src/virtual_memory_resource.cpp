// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/virtual_memory_resource.hpp"

#include "cudapmr/detail/address_ranges.hpp"
#include "cudapmr/detail/cuda_check.hpp"
#include "cudapmr/detail/stream_ordering.hpp"
#include "cudapmr/detail/synchronize.hpp"
#include "cudapmr/detail/virtual_memory_driver.hpp"
#include "cudapmr/device.hpp"
#include "cudapmr/error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <iterator>
#include <map>
#include <new>
#include <optional>
#include <stdexcept>
#include <utility>

namespace cudapmr {
namespace {

int validated(int device) {
  detail::validate_device_ordinal(device);
  return device;
}

const detail::virtual_memory_driver& driver() { return detail::load_virtual_memory_driver(); }

CUmemAllocationProp allocation_properties(int device, bool exportable, bool rdma) {
  CUmemAllocationProp properties{};
  properties.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  properties.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  properties.location.id = device;
  properties.requestedHandleTypes = exportable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
  properties.allocFlags.gpuDirectRDMACapable = rdma ? 1 : 0;
  return properties;
}

int device_attribute(int ordinal, CUdevice_attribute attribute, const char* name) {
  CUdevice device{};
  detail::check_driver(driver().device_get(&device, ordinal),
                       [&] { return fmt::format("cuDeviceGet for device {}", ordinal); });
  int value = 0;
  detail::check_driver(driver().device_get_attribute(&value, attribute, device),
                       [&] { return fmt::format("cuDeviceGetAttribute({}) of device {}", name, ordinal); });
  return value;
}

/// The most physical allocations one range is made of: each is a map and an
/// unmap of its own (microseconds), and a range taken over again keeps its
/// pieces; a working set growing by 10 % from 1 MiB to 1 GiB makes about 75.
constexpr std::size_t max_pieces = 128;

/// A stream's process-wide unique number (never reused, unlike its handle); empty where CUDA cannot tell.
std::optional<unsigned long long> stream_id(stream_ref stream) noexcept {
  unsigned long long id = 0;
  if (!detail::recover_from(cudaStreamGetId(stream.get(), &id))) return std::nullopt;
  return id;
}

/// A cuMemCreate failure that may be the handle type's rather than the size's: anything but running out of
/// memory (a retry without the handle type tells).
bool is_handle_type_refusal(CUresult status) noexcept {
  return status != CUDA_SUCCESS && status != CUDA_ERROR_OUT_OF_MEMORY;
}

}  // namespace

/// One physical allocation mapped at `offset` into a range. Its handle is the
/// creation reference, released at unmap; 0 once a later allocation on the
/// same stream took the physical memory over (the range then only unmaps it).
struct virtual_memory_resource::piece {
  CUmemGenericAllocationHandle handle = 0;
  std::size_t offset = 0;
  std::size_t bytes = 0;
};

/// A range out of every list, its pieces still mapped: being unmapped once its event has completed.
struct virtual_memory_resource::freed_range {
  std::uintptr_t address = 0;
  std::size_t bytes = 0;
  std::vector<piece> pieces;
  detail::ordering_event event = nullptr;  // null: freed on a captured stream, held until release()
  std::optional<unsigned long long> stream_id;  // the freeing stream's, while the event orders its own pages
};

struct virtual_memory_resource::book {
  /// One range handed out: a physical allocation of its own, or (taken over
  /// from frees on its stream) several, mapped one after another.
  struct mapping {
    std::vector<piece> pieces;
    std::size_t bytes = 0;
    bool exportable = false;
    bool of_graph = false;  // allocated during a capture: the graph may use it at every launch
  };

  book(std::uintptr_t base, std::size_t bytes, std::string owner) { ranges.emplace_back(base, bytes, std::move(owner)); }

  /// The lowest fitting address of the first range that has one.
  [[nodiscard]] std::optional<std::uintptr_t> try_take(std::size_t bytes, std::size_t alignment) {
    for (detail::address_ranges& range : ranges)
      if (const std::optional<std::uintptr_t> address = range.try_take(bytes, alignment)) return address;
    return std::nullopt;
  }
  /// Gives [address, address + bytes) back to the range it came from.
  void give_back(std::uintptr_t address, std::size_t bytes) {
    for (detail::address_ranges& range : ranges)
      if (address >= range.base() && address - range.base() < range.size()) return range.give_back(address, bytes);
    throw std::invalid_argument(fmt::format("{} bytes at {:#x} given back lie in no reserved range", bytes, address));
  }

  /// The reserved ranges, the constructor's first.
  std::vector<detail::address_ranges> ranges;
  std::map<std::uintptr_t, mapping> live;
  std::vector<freed_range> pending;  // freed, still mapped, in the order of their frees
  /// The tickets of the batches of frees that threads took out of `pending`
  /// and are unmapping (or waiting for): memory on its way back, which a
  /// refused allocation waits for rather than refuse what is about to be free.
  std::vector<std::uint64_t> unmaps_in_flight;
  std::uint64_t last_unmap_ticket = 0;
  std::condition_variable unmap_finished;

  /// Counts a batch in flight, its room in `unmaps_in_flight` reserved: its ticket.
  [[nodiscard]] std::uint64_t start_unmap() noexcept {
    unmaps_in_flight.push_back(++last_unmap_ticket);
    return last_unmap_ticket;
  }
  /// How many batches up to ticket `last` are still in flight.
  [[nodiscard]] std::size_t unmaps_in_flight_up_to(std::uint64_t last) const noexcept {
    return static_cast<std::size_t>(std::count_if(unmaps_in_flight.begin(), unmaps_in_flight.end(),
                                                  [&](std::uint64_t ticket) { return ticket <= last; }));
  }

  /// The batches a refused request waits for: those in flight when it was
  /// first refused, so that others' steady frees cannot keep it waiting.
  struct unmaps_awaited {
    std::uint64_t last_ticket = 0;
    std::size_t in_flight = 0;  // of those, as the refused call began
  };
  [[nodiscard]] unmaps_awaited unmaps_under_way() const noexcept {
    return {last_unmap_ticket, unmaps_in_flight.size()};
  }
  /// With the leaf's mutex held by `lock`, after a refusal: unless none of
  /// `awaited` is still in flight (false: refuse), waits until one more of them
  /// has finished (true: memory may have come back, the call is worth making again).
  [[nodiscard]] bool await_unmap(std::unique_lock<std::mutex>& lock, unmaps_awaited& awaited) {
    if (awaited.in_flight == 0) return false;
    unmap_finished.wait(lock, [&] { return unmaps_in_flight_up_to(awaited.last_ticket) < awaited.in_flight; });
    awaited.in_flight = unmaps_in_flight_up_to(awaited.last_ticket);
    return true;
  }
};

/// Ends a batch of frees taken out of the pending list (counted in flight when
/// taken) once they are unmapped or back in the list, and wakes the refused
/// allocations that wait for it.
struct virtual_memory_resource::unmap_batch {
  virtual_memory_resource& leaf;
  std::uint64_t ticket;
  unmap_batch(virtual_memory_resource& taken_from, std::uint64_t its_ticket) noexcept
      : leaf(taken_from), ticket(its_ticket) {}
  unmap_batch(const unmap_batch&) = delete;
  unmap_batch& operator=(const unmap_batch&) = delete;
  ~unmap_batch() {
    {
      const std::lock_guard lock(leaf.mutex_);
      std::erase(leaf.book_->unmaps_in_flight, ticket);
    }
    leaf.book_->unmap_finished.notify_all();
  }
};


virtual_memory_resource::virtual_memory_resource(int device, virtual_memory_options options)
    : stream_ordered_resource(memory_kind::device, validated(device)), bound_stream_(device) {
  if (device_attribute(device, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                       "CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED") == 0)
    throw cuda_error(cudaErrorNotSupported,
                     fmt::format("virtual_memory_resource on device {}: the device does not support virtual memory "
                                 "management (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0)",
                                 device));
  rdma_ = options.rdma && device_attribute(device, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
                                           "CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED") != 0;
  exportable_.store(options.exportable &&
                        device_attribute(device, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                                         "CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED") != 0,
                    std::memory_order_relaxed);

  const CUmemAllocationProp properties = allocation_properties(device, is_exportable(), rdma_);
  detail::check_driver(
      driver().get_allocation_granularity(&granularity_, &properties, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
      [&] { return fmt::format("cuMemGetAllocationGranularity (recommended) for device {}", device); });
  if (options.reserve_bytes != 0 && options.reserve_bytes < granularity_)
    throw std::invalid_argument(fmt::format(
        "virtual_memory_options.reserve_bytes {} is below the allocation granularity {} of device {}",
        options.reserve_bytes, granularity_, device));
  // 0: 1.125 times the device's memory, so that fragmentation of the address
  // range never refuses what the device could still hold.
  const std::size_t wanted =
      options.reserve_bytes != 0 ? options.reserve_bytes : cudapmr::device(device).total_memory() / 8 * 9;
  first_range_bytes_ = detail::round_up_to(wanted, granularity_);
  if (first_range_bytes_ == 0)
    throw std::invalid_argument(fmt::format(
        "virtual_memory_options.reserve_bytes {} overflows when rounded up to the granularity {}", wanted, granularity_));
  grows_ = options.reserve_bytes == 0;

  CUdeviceptr base = 0;
  detail::check_driver(driver().address_reserve(&base, first_range_bytes_, granularity_, 0, 0), [&] {
    return fmt::format("cuMemAddressReserve of {} bytes (aligned to {}) for device {}", first_range_bytes_,
                       granularity_, device);
  });
  try {
    book_ = std::make_unique<book>(static_cast<std::uintptr_t>(base), first_range_bytes_, description());
  } catch (...) {
    detail::assert_driver_success(driver().address_free(base, first_range_bytes_), "cuMemAddressFree", __FILE__,
                                  __LINE__);
    throw;
  }
  reserved_bytes_.store(first_range_bytes_, std::memory_order_relaxed);
}

virtual_memory_resource::~virtual_memory_resource() {
  try {
    release();
  } catch (...) {  // a failed synchronize: what was held stays mapped, and so does the reservation
  }
  std::vector<freed_range> rest;
  try {
    const std::lock_guard lock(mutex_);
    // Live allocations too: the reservation can only be freed wholly unmapped.
    rest.reserve(book_->live.size());
    for (const auto& [address, held] : book_->live) {
      rest.push_back({address, held.bytes, held.pieces, nullptr, std::nullopt});
      allocated_.fetch_sub(held.bytes, std::memory_order_relaxed);
      pending_.fetch_add(held.bytes, std::memory_order_relaxed);
    }
    book_->live.clear();
  } catch (...) {
    return;  // no memory to list them: leave everything mapped rather than free a reservation still in use
  }
  unmap(rest);  // which frees the added ranges it leaves wholly free
  if (mappings() != 0) return;  // the first range can only be freed wholly unmapped
  for (const detail::address_ranges& range : book_->ranges)
    detail::assert_driver_success(driver().address_free(static_cast<CUdeviceptr>(range.base()), range.size()),
                                  "cuMemAddressFree", __FILE__, __LINE__);
}

std::size_t virtual_memory_resource::address_reservations() const {
  const std::lock_guard lock(mutex_);
  return book_->ranges.size();
}

std::optional<std::uintptr_t> virtual_memory_resource::take_from_another_range(std::size_t bytes,
                                                                               std::size_t alignment) {
  // As large as the first range, which no request passes (do_allocate_async).
  const std::size_t size = first_range_bytes_;
  CUdeviceptr base = 0;
  const CUresult status = driver().address_reserve(&base, size, alignment, 0, 0);
  if (status == CUDA_ERROR_OUT_OF_MEMORY) return std::nullopt;  // no address space left: the caller waits instead
  detail::check_driver(status, [&] {
    return fmt::format("cuMemAddressReserve of another {} bytes (aligned to {}) for {}", size, alignment,
                       description());
  });
  try {
    book_->ranges.emplace_back(static_cast<std::uintptr_t>(base), size, description());
  } catch (...) {
    detail::assert_driver_success(driver().address_free(base, size), "cuMemAddressFree", __FILE__, __LINE__);
    throw;
  }
  reserved_bytes_.fetch_add(size, std::memory_order_relaxed);
  return book_->ranges.back().try_take(bytes, alignment);
}

void virtual_memory_resource::free_empty_ranges() noexcept {
  auto& ranges = book_->ranges;
  for (std::size_t index = ranges.size() - 1; index >= 1; --index) {  // never the first
    const detail::address_ranges& range = ranges[index];
    if (range.free_bytes() != range.size()) continue;
    detail::assert_driver_success(driver().address_free(static_cast<CUdeviceptr>(range.base()), range.size()),
                                  "cuMemAddressFree", __FILE__, __LINE__);
    reserved_bytes_.fetch_sub(range.size(), std::memory_order_relaxed);
    ranges.erase(ranges.begin() + static_cast<std::ptrdiff_t>(index));
  }
}

void virtual_memory_resource::refuse_address_space(std::size_t bytes, std::size_t alignment,
                                                   std::size_t requested) const {
  if (book_->ranges.size() == 1)
    static_cast<void>(book_->ranges.front().take(bytes, alignment));  // refuses, naming the range
  std::size_t free_bytes = 0;
  std::size_t largest = 0;
  for (const detail::address_ranges& range : book_->ranges) {
    free_bytes += range.free_bytes();
    largest = std::max(largest, range.largest_free_range());
  }
  throw out_of_memory(requested, alignment, description(),
                      fmt::format("no free range of the {} reserved bytes in {} ranges fits {} bytes ({} free, the "
                                  "largest free range {}), and the driver reserves no more address space",
                                  reserved_address_bytes(), book_->ranges.size(), bytes, free_bytes, largest));
}

std::string virtual_memory_resource::description() const {
  return fmt::format("virtual_memory_resource (device {})", device_id());
}

void* virtual_memory_resource::do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) {
  if (bytes == 0) return nullptr;  // whatever the alignment: zero bytes are never backed
  const std::size_t rounded = detail::round_up_to(bytes, granularity_);
  if (rounded == 0)
    throw out_of_memory(bytes, alignment, description(),
                        fmt::format("the request rounded up to the granularity {} overflows size_t", granularity_));
  if (rounded > first_range_bytes_)
    throw out_of_memory(bytes, alignment, description(),
                        fmt::format("{} bytes (rounded to the granularity) exceed the reserved address range of {} bytes",
                                    rounded, first_range_bytes_));
  unmap_pending(false);
  return map_new(rounded, std::max(alignment, granularity_), bytes, stream);
}

std::vector<virtual_memory_resource::piece> virtual_memory_resource::take_over_pending(stream_ref stream,
                                                                                       std::size_t bytes) noexcept {
  std::vector<piece> taken;
  try {
    const std::lock_guard lock(mutex_);
    if (book_->pending.empty()) return taken;
    const std::optional<unsigned long long> id = stream_id(stream);
    if (!id) return taken;
    // Room for every piece first: nothing below throws once a range has changed.
    taken.reserve(max_pieces - 1);
    // Largest first, whole ranges, while they fit in the request. Only ranges
    // whose frees the event orders carry a stream id; a range taken over loses it.
    std::vector<freed_range*> candidates;
    for (freed_range& freed : book_->pending)
      if (freed.stream_id == id) candidates.push_back(&freed);
    std::sort(candidates.begin(), candidates.end(),
              [](const freed_range* a, const freed_range* b) { return a->bytes > b->bytes; });
    std::size_t taken_bytes = 0;
    for (freed_range* freed : candidates) {
      // One piece more is created for what the taken ones lack.
      if (taken_bytes + freed->bytes > bytes || taken.size() + freed->pieces.size() > max_pieces - 1) continue;
      for (piece& each : freed->pieces) {
        taken.push_back(each);
        each.handle = 0;  // the range now only unmaps it
      }
      freed->stream_id.reset();
      taken_bytes += freed->bytes;
    }
    pending_.fetch_sub(taken_bytes, std::memory_order_relaxed);
    mapped_.fetch_sub(taken_bytes, std::memory_order_relaxed);  // counted again once mapped in the new range
  } catch (...) {  // no memory for the lists: what was taken so far is used, the rest stays pending
  }
  return taken;
}

void* virtual_memory_resource::map_new(std::size_t bytes, std::size_t alignment, std::size_t requested,
                                       stream_ref stream) {
  const detail::scoped_device on_device(device_id());
  const auto& calls = driver();
  const bool of_graph = detail::cuda_stream_ordering().is_capturing(stream);
  // Physical memory freed earlier on this stream, its work still queued, may
  // serve again in the stream's order: a growing working set then holds one
  // copy of its pages, not the old ones too until their work is done. From
  // here on `pieces` holds their only creation references: released below on
  // every failure.
  std::vector<piece> pieces;
  if (!of_graph && !is_exportable()) pieces = take_over_pending(stream, bytes);
  const auto refused = [&](CUresult status, const char* call) {
    return out_of_memory(requested, alignment, description(),
                         fmt::format("{} of {} bytes: {}", call, bytes, detail::driver_error_name(status)));
  };

  // Taken-over pieces come first; what they lack is created. Until the range
  // is live, a failure releases them all (taken-over memory then goes back
  // once its old range is unmapped).
  std::size_t offset = 0;
  for (piece& each : pieces) {
    each.offset = offset;
    offset += each.bytes;
  }
  const auto release_pieces = [&] {
    for (const piece& each : pieces)
      detail::assert_driver_success(calls.release(each.handle), "cuMemRelease", __FILE__, __LINE__);
  };
  const std::size_t missing = bytes - offset;

  // The physical memory first: where the device is full, pending frees are
  // unmapped (their events waited for) and the creation tried once more.
  CUmemGenericAllocationHandle handle = 0;
  bool exportable = is_exportable() && pieces.empty();
  const auto create = [&] {
    CUmemAllocationProp properties = allocation_properties(device_id(), exportable, rdma_);
    CUresult status = calls.create(&handle, missing, &properties, 0);
    if (exportable && is_handle_type_refusal(status)) {
      properties.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
      status = calls.create(&handle, missing, &properties, 0);
      if (status == CUDA_SUCCESS) {  // the handle type was what the driver refused: made without from now on
        exportable = false;
        exportable_.store(false, std::memory_order_relaxed);
      }
    }
    return status;
  };
  if (missing != 0) {
    CUresult status = CUDA_SUCCESS;
    try {
      status = create();
      if (status == CUDA_ERROR_OUT_OF_MEMORY) {
        unmap_pending(true);
        book::unmaps_awaited awaited;
        {
          const std::lock_guard lock(mutex_);
          awaited = book_->unmaps_under_way();
        }
        for (;;) {  // once more, and again each time another thread's unmap under way gives memory back
          status = create();
          std::unique_lock lock(mutex_);
          if (status != CUDA_ERROR_OUT_OF_MEMORY || !book_->await_unmap(lock, awaited)) break;
        }
      }
    } catch (...) {
      release_pieces();
      throw;
    }
    if (status != CUDA_SUCCESS) release_pieces();
    if (status == CUDA_ERROR_OUT_OF_MEMORY) throw refused(status, "cuMemCreate");
    detail::check_driver(status, [&] {
      return fmt::format("cuMemCreate of {} bytes on device {} for {}", missing, device_id(), description());
    });
    try {
      pieces.push_back({handle, offset, missing});
    } catch (...) {
      detail::assert_driver_success(calls.release(handle), "cuMemRelease", __FILE__, __LINE__);
      release_pieces();
      throw;
    }
  }

  std::uintptr_t address = 0;
  try {
    std::optional<std::uintptr_t> taken;
    {
      const std::lock_guard lock(mutex_);
      taken = book_->try_take(bytes, alignment);
      // Too fragmented: more address space costs nothing, a wait for pending frees may.
      if (!taken && grows_) taken = take_from_another_range(bytes, alignment);
    }
    if (!taken) {  // the address ranges are full: pending frees hold part of them
      unmap_pending(true);
      std::unique_lock lock(mutex_);
      book::unmaps_awaited awaited = book_->unmaps_under_way();
      for (;;) {  // again each time another thread's unmap under way gives addresses back
        taken = book_->try_take(bytes, alignment);
        if (taken) break;
        if (!book_->await_unmap(lock, awaited)) refuse_address_space(bytes, alignment, requested);
      }
    }
    address = *taken;
  } catch (...) {
    release_pieces();
    throw;
  }

  // Each piece mapped and made accessible in turn; a failure unmaps those before it.
  std::size_t mapped_pieces = 0;
  const auto undo = [&] {
    for (std::size_t index = 0; index < mapped_pieces; ++index)
      detail::assert_driver_success(calls.unmap(static_cast<CUdeviceptr>(address + pieces[index].offset),
                                                pieces[index].bytes),
                                    "cuMemUnmap", __FILE__, __LINE__);
    release_pieces();
    const std::lock_guard lock(mutex_);
    book_->give_back(address, bytes);
  };
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device_id();
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  for (const piece& each : pieces) {
    const auto pointer = static_cast<CUdeviceptr>(address + each.offset);
    const CUresult mapped = calls.map(pointer, each.bytes, 0, each.handle, 0);
    if (mapped == CUDA_SUCCESS) ++mapped_pieces;
    const CUresult granted = mapped == CUDA_SUCCESS ? calls.set_access(pointer, each.bytes, &access, 1) : mapped;
    if (granted == CUDA_SUCCESS) continue;
    undo();
    const char* call = mapped != CUDA_SUCCESS ? "cuMemMap" : "cuMemSetAccess";
    if (granted == CUDA_ERROR_OUT_OF_MEMORY) throw refused(granted, call);
    detail::throw_driver_error(granted,
                               fmt::format("{} of {} bytes at {:#x} for {}", call, each.bytes, address, description()));
  }
  try {
    const std::lock_guard lock(mutex_);
    book_->live.emplace(address, book::mapping{pieces, bytes, exportable, of_graph});
  } catch (...) {  // no memory to remember the mapping: undo it
    undo();
    throw refused(CUDA_ERROR_OUT_OF_MEMORY, "the list of mappings");
  }

  mappings_.fetch_add(1, std::memory_order_relaxed);
  allocated_.fetch_add(bytes, std::memory_order_relaxed);
  const std::size_t now = mapped_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::size_t high = mapped_high_.load(std::memory_order_relaxed);
  while (now > high && !mapped_high_.compare_exchange_weak(high, now, std::memory_order_relaxed)) {
  }
  return reinterpret_cast<void*>(address);
}

void virtual_memory_resource::do_deallocate_async(void* p, std::size_t /*bytes*/, std::size_t /*alignment*/,
                                                  stream_ref stream) noexcept {
  detail::stream_ordering& ordering = detail::cuda_stream_ordering();
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  try {
    const std::lock_guard lock(mutex_);
    const auto found = book_->live.find(address);
    if (found == book_->live.end()) return;  // not ours, or freed twice: ignored
    // Reserve first, so that the range is never out of both lists; doubling,
    // as push_back would (room for one more each time copies the list at every free).
    auto& pending = book_->pending;
    if (pending.size() == pending.capacity()) {
      try {
        pending.reserve(std::max<std::size_t>(8, 2 * pending.size()));
      } catch (const std::bad_alloc&) {  // the host is short: room for this one range may still be had
        pending.reserve(pending.size() + 1);
      }
    }
    book::mapping freed = std::move(found->second);
    book_->live.erase(found);
    // Captured (or unknown): no event can order the unmap after a replay, so
    // the range waits for release(). Otherwise an event recorded now completes
    // once the work queued before the free is done.
    // Allocated during a capture: a graph launched later writes there again,
    // wherever it is freed, so the range waits for release() too.
    const detail::ordering_event event =
        freed.of_graph || ordering.is_capturing(stream) ? nullptr : ordering.record(stream);
    // Moves only from here on: the range is never out of both lists. A stream
    // id lets a later allocation take the pages over: never for a range made
    // exportable (another process may map them), even once the leaf stopped exporting.
    book_->pending.push_back({address, freed.bytes, std::move(freed.pieces), event,
                              event != nullptr && !freed.exportable ? stream_id(stream) : std::nullopt});
    allocated_.fetch_sub(freed.bytes, std::memory_order_relaxed);
    pending_.fetch_add(freed.bytes, std::memory_order_relaxed);
    if (event == nullptr) return;
  } catch (...) {  // no memory to remember it: the range stays live, mapped, rather than unmapped under queued work
    return;
  }
  // A stream with nothing left to run (the common case once a program
  // synchronizes) has completed the event already: its pages go now, not at
  // the next allocation, so an idle program holds nothing it freed.
  try {
    unmap_pending(false);
  } catch (...) {  // a failed query leaves the ranges pending
  }
}

void virtual_memory_resource::unmap_pending(bool wait) {
  detail::stream_ordering& ordering = detail::cuda_stream_ordering();
  std::vector<freed_range> ready;
  std::vector<freed_range> waiting;
  std::uint64_t ticket = 0;
  {
    const std::lock_guard lock(mutex_);
    auto& pending = book_->pending;
    if (pending.empty()) return;
    std::vector<freed_range> kept;  // in the order of the frees
    // Room in every list first: a range moved out of `pending` into a list
    // that then fails to grow would be lost, its pages mapped for good.
    book_->unmaps_in_flight.reserve(book_->unmaps_in_flight.size() + 1);
    ready.reserve(pending.size());
    kept.reserve(pending.size());
    if (wait) waiting.reserve(pending.size());
    for (freed_range& freed : pending) {
      if (freed.event != nullptr && ordering.has_completed(freed.event)) ready.push_back(std::move(freed));
      else if (freed.event != nullptr && wait) waiting.push_back(std::move(freed));
      else kept.push_back(std::move(freed));
    }
    pending.swap(kept);
    if (ready.empty() && waiting.empty()) return;
    ticket = book_->start_unmap();
  }
  const unmap_batch batch(*this, ticket);
  unmap(ready);
  // The waits, outside the lock: each blocks only until its own event.
  for (auto next = waiting.begin(); next != waiting.end(); ++next) {
    if (ordering.wait(next->event)) continue;
    const auto unfinished = static_cast<std::size_t>(waiting.end() - next);
    {
      const std::lock_guard lock(mutex_);
      book_->pending.insert(book_->pending.end(), std::make_move_iterator(next),
                            std::make_move_iterator(waiting.end()));
    }
    waiting.erase(next, waiting.end());
    unmap(waiting);
    throw cuda_error(cudaErrorUnknown, fmt::format("cudaEventSynchronize for a pending free of {} failed; {} freed "
                                                   "ranges stay mapped, pending",
                                                   description(), unfinished));
  }
  unmap(waiting);
}

void virtual_memory_resource::unmap(std::vector<freed_range>& freed) noexcept {
  if (freed.empty()) return;
  const auto& calls = driver();
  detail::stream_ordering& ordering = detail::cuda_stream_ordering();
  std::size_t physical_bytes = 0;  // what goes back to the device: pieces not taken over
  for (freed_range& range : freed) {
    if (range.event != nullptr) ordering.recycle(range.event);
    range.event = nullptr;
    bool unmapped = true;
    for (const piece& each : range.pieces) {
      const CUresult status = calls.unmap(static_cast<CUdeviceptr>(range.address + each.offset), each.bytes);
      detail::assert_driver_success(status, "cuMemUnmap", __FILE__, __LINE__);
      unmapped = unmapped && status == CUDA_SUCCESS;
      if (each.handle == 0) continue;  // taken over: mapped elsewhere, and counted there
      // The creation reference: with no mapping left, the memory goes back to the device.
      detail::assert_driver_success(calls.release(each.handle), "cuMemRelease", __FILE__, __LINE__);
      physical_bytes += each.bytes;
    }
    if (!unmapped) range.bytes = 0;  // still mapped: its addresses stay taken
  }
  std::size_t unmapped_count = 0;
  const std::lock_guard lock(mutex_);
  for (const freed_range& range : freed) {
    if (range.bytes == 0) continue;
    try {
      book_->give_back(range.address, range.bytes);
    } catch (const std::bad_alloc&) {  // no memory for one more free range: those addresses stay unused
    }  // anything else is a bookkeeping defect, which ends the program here (noexcept)
    ++unmapped_count;
  }
  free_empty_ranges();
  pending_.fetch_sub(physical_bytes, std::memory_order_relaxed);
  mapped_.fetch_sub(physical_bytes, std::memory_order_relaxed);
  mappings_.fetch_sub(unmapped_count, std::memory_order_relaxed);
  freed.clear();
}

void virtual_memory_resource::release_completed() { unmap_pending(true); }

void virtual_memory_resource::unmap_completed() noexcept {
  try {
    unmap_pending(false);  // throws only where it waits
  } catch (...) {
  }
}

bool virtual_memory_resource::has_frees_waiting_on_work() const noexcept {
  const std::lock_guard lock(mutex_);
  return std::any_of(book_->pending.begin(), book_->pending.end(),
                     [](const freed_range& freed) { return freed.event != nullptr; });
}

void virtual_memory_resource::do_trim(stream_ref /*stream: each pending free has its own event*/) {
  release_completed();
}

void virtual_memory_resource::do_report(resource_state& report) const {
  report.used_bytes = allocated_bytes();
  report.reserved_bytes = mapped_bytes();
  report.peak_reserved_bytes = mapped_bytes_high();
  report.releasable_bytes = pending_bytes();
}

void virtual_memory_resource::release() {
  std::vector<freed_range> freed;
  std::uint64_t ticket = 0;
  {
    const std::lock_guard lock(mutex_);
    if (book_->pending.empty()) return;
    book_->unmaps_in_flight.reserve(book_->unmaps_in_flight.size() + 1);
    freed.swap(book_->pending);
    ticket = book_->start_unmap();
  }
  const unmap_batch batch(*this, ticket);
  try {
    detail::synchronize_devices(kind(), device_id());  // in relaxed capture mode: another thread's capture stays valid
  } catch (...) {
    const std::lock_guard lock(mutex_);
    book_->pending.insert(book_->pending.begin(), std::make_move_iterator(freed.begin()),
                          std::make_move_iterator(freed.end()));
    throw;
  }
  unmap(freed);
}

virtual_memory_resource::exported_handle virtual_memory_resource::export_handle(const void* p) const {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  book::mapping exported;
  {
    const std::lock_guard lock(mutex_);
    const auto found = book_->live.find(address);
    if (found == book_->live.end())
      throw std::invalid_argument(fmt::format("export_handle: {} is not the start of a live allocation of {}",
                                              fmt::ptr(p), description()));
    exported = found->second;
  }
  if (!exported.exportable)
    throw cuda_error(cudaErrorNotSupported,
                     fmt::format("export_handle of {} ({} bytes) from {}: the allocation was made without the POSIX "
                                 "file descriptor handle type ({})",
                                 fmt::ptr(p), exported.bytes, description(),
                                 is_exportable() ? "the handle type was not asked for"
                                                 : "the driver refused it, or virtual_memory_options.exportable is off"));
  const auto& calls = driver();
  // A reference of our own on the handle mapped at p, for the export.
  CUmemGenericAllocationHandle handle = 0;
  detail::check_driver(calls.retain_allocation_handle(&handle, const_cast<void*>(p)), [&] {
    return fmt::format("cuMemRetainAllocationHandle at {} of {}", fmt::ptr(p), description());
  });
  int descriptor = -1;
  const CUresult status =
      calls.export_to_shareable_handle(&descriptor, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  detail::assert_driver_success(calls.release(handle), "cuMemRelease", __FILE__, __LINE__);
  detail::check_driver(status, [&] {
    return fmt::format("cuMemExportToShareableHandle (POSIX file descriptor) of {} ({} bytes) from {}", fmt::ptr(p),
                       exported.bytes, description());
  });
  return {descriptor, exported.bytes};
}

}  // namespace cudapmr
