// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/detail/lifetime.hpp"

#include "cudapmr/detail/synchronize.hpp"
#include "cudapmr/stream_ordered_resource.hpp"

#include <array>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <unordered_set>
#include <vector>

namespace cudapmr::detail {
namespace {

/// Live resources at once that get lifetime checks; later ones are untracked.
constexpr std::uint32_t resource_slots = std::uint32_t{1} << 14;
/// Destroyed stream handles remembered at once (until CUDA reuses them).
constexpr std::size_t retired_stream_limit = std::size_t{1} << 16;
/// Abandoned allocations reported on stderr; later ones are only counted.
constexpr std::size_t abandon_reports = 10;

/// Each slot's generation: that of its resource while one holds it, one more
/// once that resource is gone. Slot 0 is never handed out.
struct resource_table {
  std::array<std::atomic<std::uint32_t>, resource_slots> generations{};
  std::mutex mutex;  // guards the two below; only construction and destruction take it
  std::vector<std::uint32_t> free_slots;
  std::uint32_t next_unused = 1;
};

struct retired_stream_set {
  std::atomic<std::size_t> count{0};  // read without the lock on every close
  std::mutex mutex;
  std::unordered_set<cudaStream_t> handles;
};

struct abandoned_list {
  std::atomic<std::size_t> count{0};
  std::mutex mutex;
  std::vector<void*> pointers;  // reachable, so that leak checkers know them
};

// Never destroyed: resources, streams and buffers destroyed at exit still use them.
resource_table& resources() {
  static auto* table = new resource_table();
  return *table;
}
retired_stream_set& retired_streams() {
  static auto* set = new retired_stream_set();
  return *set;
}
abandoned_list& abandoned() {
  static auto* list = new abandoned_list();
  return *list;
}

std::uint32_t slot_of(resource_identity identity) noexcept { return static_cast<std::uint32_t>(identity >> 32); }
std::uint32_t generation_of(resource_identity identity) noexcept { return static_cast<std::uint32_t>(identity); }

}  // namespace

resource_identity register_resource() noexcept {
  resource_table& table = resources();
  std::uint32_t slot = 0;
  try {
    const std::lock_guard lock(table.mutex);
    if (!table.free_slots.empty()) {
      slot = table.free_slots.back();
      table.free_slots.pop_back();
    } else if (table.next_unused < resource_slots) {
      slot = table.next_unused++;
    }
  } catch (...) {
    return 0;  // the lock failed: untracked
  }
  if (slot == 0) return 0;
  const std::uint32_t generation = table.generations[slot].load(std::memory_order_relaxed);
  return resource_identity{slot} << 32 | generation;
}

void retire_resource(resource_identity identity) noexcept {
  const std::uint32_t slot = slot_of(identity);
  if (slot == 0 || slot >= resource_slots) return;
  resource_table& table = resources();
  table.generations[slot].fetch_add(1, std::memory_order_release);
  try {
    const std::lock_guard lock(table.mutex);
    table.free_slots.push_back(slot);
  } catch (...) {
    // The slot is lost to later resources, which then go untracked sooner; nothing else.
  }
}

bool is_live_resource(resource_identity identity) noexcept {
  const std::uint32_t slot = slot_of(identity);
  if (slot == 0 || slot >= resource_slots) return true;
  return resources().generations[slot].load(std::memory_order_acquire) == generation_of(identity);
}

void retire_stream(cudaStream_t handle) noexcept {
  retired_stream_set& set = retired_streams();
  try {
    const std::lock_guard lock(set.mutex);
    if (set.handles.size() < retired_stream_limit && set.handles.insert(handle).second)
      set.count.fetch_add(1, std::memory_order_relaxed);
  } catch (...) {
    // Not remembered: a buffer closed on this handle later is not redirected.
  }
}

void adopt_stream(cudaStream_t handle) noexcept {
  retired_stream_set& set = retired_streams();
  if (set.count.load(std::memory_order_relaxed) == 0) return;
  try {
    const std::lock_guard lock(set.mutex);
    if (set.handles.erase(handle) != 0) set.count.fetch_sub(1, std::memory_order_relaxed);
  } catch (...) {
  }
}

bool is_retired_stream(stream_ref stream) noexcept {
  retired_stream_set& set = retired_streams();
  if (set.count.load(std::memory_order_relaxed) == 0) return false;
  try {
    const std::lock_guard lock(set.mutex);
    return set.handles.contains(stream.get());
  } catch (...) {
    return false;
  }
}

void close_buffer(stream_ordered_resource* resource, resource_identity identity, void* p, std::size_t bytes,
                  std::size_t alignment, stream_ref stream) noexcept {
  if (!is_live_resource(identity)) return abandon_allocation(p, bytes, identity);
  if (is_retired_stream(stream)) {
    try {
      synchronize_devices(resource->kind(), resource->device_id());
    } catch (...) {
      // The device failed; freeing on the bound stream is still the safest choice left.
    }
    stream = resource->bound_stream();
  }
  resource->deallocate_async(p, bytes, alignment, stream);
}

void abandon_allocation(void* p, std::size_t bytes, resource_identity identity) noexcept {
  abandoned_list& list = abandoned();
  const std::size_t earlier = list.count.fetch_add(1, std::memory_order_relaxed);
  try {
    const std::lock_guard lock(list.mutex);
    list.pointers.push_back(p);
  } catch (...) {
  }
  if (earlier < abandon_reports)
    std::fprintf(stderr,
                 "cudapmr: a buffer of %zu bytes at %p outlived its resource (slot %u): its memory is leaked%s\n",
                 bytes, p, slot_of(identity), earlier + 1 == abandon_reports ? "; later ones are only counted" : "");
}

std::size_t abandoned_allocations() noexcept { return abandoned().count.load(std::memory_order_relaxed); }

}  // namespace cudapmr::detail
