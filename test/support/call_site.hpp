// SPDX-License-Identifier: Apache-2.0
#pragma once
// A call site of its own for the adaptors' call stacks to start in: a
// captured stack's first frame must be in the function that allocated, what
// ever frames the library's entry points leave (or, tail-called, do not).
#include <cudapmr/stream_ordered_resource.hpp>

#include <cstddef>
#include <cstdint>
#include <memory_resource>

namespace cudapmr::test {

inline void* volatile call_site_sink = nullptr;

/// The return address of its call: an address in the caller's code.
[[gnu::noinline]] inline void* code_address_here() { return __builtin_return_address(0); }

/// Where each call site's code ends, at the latest: an address past its allocation's call.
inline void* volatile direct_call_site_end = nullptr;
inline void* volatile pmr_call_site_end = nullptr;

/// Allocates `bytes` through `allocate_async`, from a frame of its own.
[[gnu::noinline]] inline void* allocate_from_a_call_site(stream_ordered_resource& resource, std::size_t bytes) {
  void* p = resource.allocate_async(bytes, stream_ref{});
  call_site_sink = p;  // stores after the call: no tail call, so this frame is on the stack
  direct_call_site_end = code_address_here();
  return p;
}

/// Allocates `bytes` through std::pmr's `allocate`, from a frame of its own.
[[gnu::noinline]] inline void* allocate_through_pmr_from_a_call_site(std::pmr::memory_resource& resource,
                                                                     std::size_t bytes) {
  void* p = resource.allocate(bytes, 256);
  call_site_sink = p;
  pmr_call_site_end = code_address_here();
  return p;
}

/// Whether the return address `frame` lies in `function`'s code before
/// `end` (an address `function` took after its allocation; instrumented
/// builds make the code too long for a fixed window).
template <class Function>
[[nodiscard]] bool returns_into(void* frame, Function* function, void* end) {
  const auto start = reinterpret_cast<std::uintptr_t>(function);
  const auto address = reinterpret_cast<std::uintptr_t>(frame);
  return address > start && address < reinterpret_cast<std::uintptr_t>(end);
}

/// Whether `frame` is the return address of allocate_from_a_call_site's allocation.
[[nodiscard]] inline bool returns_into_direct_call_site(void* frame) {
  return returns_into(frame, &allocate_from_a_call_site, direct_call_site_end);
}

/// Whether `frame` is the return address of allocate_through_pmr_from_a_call_site's allocation.
[[nodiscard]] inline bool returns_into_pmr_call_site(void* frame) {
  return returns_into(frame, &allocate_through_pmr_from_a_call_site, pmr_call_site_end);
}

}  // namespace cudapmr::test
