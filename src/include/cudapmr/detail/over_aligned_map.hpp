// SPDX-License-Identifier: Apache-2.0
#pragma once
// Allocations aligned past what a leaf's allocator guarantees: over-allocated
// by the difference, aligned up, and remembered until freed. Rare, so a locked
// map is cheap enough.

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace cudapmr::detail {

/// `p` rounded up to `alignment` (a power of two).
[[nodiscard]] inline void* align_up(void* p, std::size_t alignment) noexcept {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  return reinterpret_cast<void*>((address + alignment - 1) & ~(std::uintptr_t{alignment} - 1));
}

/// Each aligned pointer handed out and the pointer its allocator gave.
class over_aligned_map {
 public:
  void insert(void* aligned, void* base) {
    const std::lock_guard lock(mutex_);
    bases_.emplace(aligned, base);
  }
  /// The allocator's pointer for `aligned`, forgotten from now on; `aligned` itself if unknown.
  [[nodiscard]] void* take(void* aligned) noexcept {
    const std::lock_guard lock(mutex_);
    const auto found = bases_.find(aligned);
    if (found == bases_.end()) return aligned;
    void* base = found->second;
    bases_.erase(found);
    return base;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<void*, void*> bases_;
};

}  // namespace cudapmr::detail
