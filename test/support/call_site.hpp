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

/// Allocates `bytes` through `allocate_async`, from a frame of its own.
[[gnu::noinline]] inline void* allocate_from_a_call_site(stream_ordered_resource& resource, std::size_t bytes) {
  void* p = resource.allocate_async(bytes, stream_ref{});
  call_site_sink = p;  // a store after the call: no tail call, so this frame is on the stack
  return p;
}

/// Allocates `bytes` through std::pmr's `allocate`, from a frame of its own.
[[gnu::noinline]] inline void* allocate_through_pmr_from_a_call_site(std::pmr::memory_resource& resource,
                                                                     std::size_t bytes) {
  void* p = resource.allocate(bytes, 256);
  call_site_sink = p;
  return p;
}

/// Whether the return address `frame` lies in `function`, a few dozen bytes of code.
template <class Function>
[[nodiscard]] bool returns_into(void* frame, Function* function) {
  const auto start = reinterpret_cast<std::uintptr_t>(function);
  const auto address = reinterpret_cast<std::uintptr_t>(frame);
  return address > start && address < start + 256;
}

}  // namespace cudapmr::test
