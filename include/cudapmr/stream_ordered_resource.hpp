// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file stream_ordered_resource.hpp
/// The base of every cudapmr resource: a `std::pmr::memory_resource` with a
/// stream-ordered extension.

#include "cudapmr/detail/lifetime.hpp"
#include "cudapmr/memory_kind.hpp"
#include "cudapmr/resource_state.hpp"
#include "cudapmr/stream.hpp"

#include <atomic>
#include <cstddef>
#include <memory_resource>
#include <string>

namespace cudapmr {

/// Alignment of every allocation when none is asked for (CCCL's choice for GPU memory).
inline constexpr std::size_t default_alignment = 256;
/// The largest alignment any resource honours; larger ones are refused.
inline constexpr std::size_t max_alignment = std::size_t{1} << 21;

/// A `std::pmr::memory_resource` whose memory can also be allocated and freed
/// in stream order.
///
/// The pmr `allocate` is a stream-ordered allocation on the resource's bound
/// stream followed by a synchronize of that stream, so its memory is usable at
/// once on the host (host-accessible kinds) and on every stream. The pmr
/// `deallocate` is a stream-ordered free on the bound stream: work on other
/// streams that touches the memory must be complete or ordered before it.
///
/// Public functions validate and forward to private virtuals (NVI).
class stream_ordered_resource : public std::pmr::memory_resource {
 public:
  stream_ordered_resource(const stream_ordered_resource&) = delete;
  stream_ordered_resource& operator=(const stream_ordered_resource&) = delete;
  /// Marks the resource gone, so that a buffer closed later leaks its memory
  /// with a message instead of calling into this object.
  ~stream_ordered_resource() override { detail::retire_resource(identity_); }

  /// Allocates `bytes` in stream order on `stream`: the memory may be used by
  /// work queued on `stream` after this call.
  /// \throws std::invalid_argument if `alignment` is not a power of two or
  ///   exceeds `max_alignment`; out_of_memory when the resource is exhausted;
  ///   cuda_error for any other CUDA failure.
  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream);
  /// As above, with `default_alignment`. (Always inlined, as the other
  /// spellings below: a captured call stack starts in the caller's function,
  /// which a frame of this one would hide in an unoptimized build.)
  [[nodiscard, gnu::always_inline]] void* allocate_async(std::size_t bytes, stream_ref stream) {
    return allocate_async(bytes, default_alignment, stream);
  }

  /// Frees `p` in stream order on `stream`: work queued on `stream` before
  /// this call may still use it. `bytes` and `alignment` must match the
  /// allocation. Never throws; a null `p` is ignored.
  void deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept;
  /// As above, with `default_alignment`.
  void deallocate_async(void* p, std::size_t bytes, stream_ref stream) noexcept {
    deallocate_async(p, bytes, default_alignment, stream);
  }

  // The names CCCL 3.1 and later give these calls, so that its
  // `cuda::mr::resource_ref` (stream-ordered) and `synchronous_resource_ref`
  // take any cudapmr resource as well.
  using std::pmr::memory_resource::allocate;
  using std::pmr::memory_resource::deallocate;
  /// allocate_async, stream first.
  [[nodiscard, gnu::always_inline]] void* allocate(stream_ref stream, std::size_t bytes,
                                                   std::size_t alignment = default_alignment) {
    return allocate_async(bytes, alignment, stream);
  }
  /// deallocate_async, stream first. Never throws.
  void deallocate(stream_ref stream, void* p, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
    deallocate_async(p, bytes, alignment, stream);
  }
  /// The pmr allocate.
  [[nodiscard, gnu::always_inline]] void* allocate_sync(std::size_t bytes, std::size_t alignment = default_alignment) {
    return allocate(bytes, alignment);
  }
  /// The pmr deallocate. Never throws.
  void deallocate_sync(void* p, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
    deallocate(p, bytes, alignment);
  }

  /// Gives back to the system what the resource holds and hands out to no one,
  /// all the way down its stack: a cache's free blocks, a pool's unused
  /// reserve. Frees the caller queued on `stream` are waited for. It may wait
  /// for the device, so it is for the last resort before out-of-memory (every
  /// cache calls it before it gives up) and for programs that go idle.
  /// \throws std::invalid_argument if `stream` is being captured (its frees
  ///   would become graph nodes); cuda_error if a wait fails; std::bad_alloc
  ///   where the host has no memory to list what it gives back (what it
  ///   listed went back).
  void trim(stream_ref stream);

  /// The kind of memory this resource hands out.
  [[nodiscard]] memory_kind kind() const noexcept { return kind_; }
  [[nodiscard]] bool is_device_accessible() const noexcept { return cudapmr::is_device_accessible(kind_); }
  [[nodiscard]] bool is_host_accessible() const noexcept { return cudapmr::is_host_accessible(kind_); }
  /// The device the memory belongs to; -1 where it belongs to no one device.
  [[nodiscard]] int device_id() const noexcept { return device_id_; }
  /// This resource among all the process has had, for lifetime checks.
  [[nodiscard]] detail::resource_identity identity() const noexcept { return identity_; }

  /// The stream the synchronous pmr `allocate`/`deallocate` are ordered on.
  /// Once it has been handed out, work queued on it may use memory given to
  /// pmr `deallocate`, so caches wait for that work before they reuse such
  /// memory; until then they know it is idle.
  [[nodiscard]] stream_ref bound_stream() const noexcept {
    const stream_ordered_resource& owner = do_bound_stream_owner();
    if (!owner.bound_stream_shared_.load(std::memory_order_relaxed))
      owner.bound_stream_shared_.store(true, std::memory_order_relaxed);
    return do_bound_stream();
  }
  /// Whether the bound stream was ever handed out, by this resource or by any
  /// other that shares it (an adaptor above, a sibling over the same upstream):
  /// only then can work from outside be queued on it.
  [[nodiscard]] bool bound_stream_shared() const noexcept {
    return do_bound_stream_owner().bound_stream_shared_.load(std::memory_order_relaxed);
  }
  /// What this resource holds and hands out, as far as it knows: its name,
  /// kind and device, and the counters it keeps (a quantity it does not know
  /// stays empty). Snapshots, out-of-memory reports and statistics are built
  /// on it. A counter CUDA will not give (a lost device) stays empty.
  /// \throws std::bad_alloc.
  [[nodiscard]] resource_state state() const;
  /// The resource this one draws from, to walk a stack; null for a leaf.
  [[nodiscard]] const stream_ordered_resource* upstream() const noexcept { return do_upstream(); }
  /// A short description for messages: "device_memory_resource (device 0)".
  [[nodiscard]] virtual std::string description() const = 0;

 protected:
  stream_ordered_resource(memory_kind kind, int device_id) noexcept
      : kind_(kind), device_id_(device_id), identity_(detail::register_resource()) {}

  /// The pmr entry points: stream-ordered calls on `bound_stream()`, plus a
  /// synchronize after allocating (none for pageable memory, which involves no
  /// stream work). Zero bytes give a non-null pointer that owns nothing, as
  /// libstdc++ declares pmr allocate never null; deallocate of zero bytes does nothing. Derived classes may override for a faster path that keeps
  /// the same guarantees.
  void* do_allocate(std::size_t bytes, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override;
  /// The bound stream, for the resource's own use: it is not handed out.
  [[nodiscard]] stream_ref own_bound_stream() const noexcept { return do_bound_stream(); }
  /// The same of another resource, for adaptors that order work on their upstream's.
  [[nodiscard]] static stream_ref own_bound_stream(const stream_ordered_resource& resource) noexcept {
    return resource.do_bound_stream();
  }

  /// The resource whose stream another's bound stream is, for adaptors that use their upstream's.
  [[nodiscard]] static const stream_ordered_resource& bound_stream_owner(const stream_ordered_resource& resource) noexcept {
    return resource.do_bound_stream_owner();
  }

  /// Identity; pool-backed resources compare equal when they share a pool.
  [[nodiscard]] bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
    return this == &other;
  }

 private:
  [[nodiscard]] virtual stream_ref do_bound_stream() const noexcept = 0;
  /// See `trim`. A leaf without a reserve gives nothing back.
  virtual void do_trim(stream_ref /*stream*/) {}
  /// The resource that owns the bound stream and knows whether it was handed
  /// out: this one, unless its bound stream is another resource's.
  [[nodiscard]] virtual const stream_ordered_resource& do_bound_stream_owner() const noexcept { return *this; }
  /// Adds what the resource knows of itself to `state` (name, kind and device are filled in).
  virtual void do_report(resource_state& /*state*/) const {}
  [[nodiscard]] virtual const stream_ordered_resource* do_upstream() const noexcept { return nullptr; }
  /// Called with a valid alignment (a power of two, at most `max_alignment`).
  virtual void* do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) = 0;
  /// Called with a non-null pointer. Must not throw.
  virtual void do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept = 0;

  memory_kind kind_;
  int device_id_;
  detail::resource_identity identity_;
  mutable std::atomic<bool> bound_stream_shared_{false};
};

namespace detail {
/// Throws the std::invalid_argument of validate_alignment.
[[noreturn]] void throw_invalid_alignment(std::size_t alignment, std::size_t bytes);
/// \throws std::invalid_argument naming `alignment` unless it is a power of two
/// no larger than `max_alignment`. Inline, on every allocation; not
/// std::has_single_bit, which built for baseline x86-64 calls libgcc's popcount.
inline void validate_alignment(std::size_t alignment, std::size_t bytes) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > max_alignment) [[unlikely]]
    throw_invalid_alignment(alignment, bytes);
}
}  // namespace detail

}  // namespace cudapmr
