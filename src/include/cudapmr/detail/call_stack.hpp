// SPDX-License-Identifier: Apache-2.0
#pragma once
// Call stacks of allocations, captured for the tracking and history adaptors
// and printed in their reports.

#include <atomic>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace cudapmr::detail {

/// How many adaptors that capture call stacks exist (each counts itself from
/// its construction to its destruction). While there are some,
/// the allocation entry points (`allocate_async`, pmr `allocate`) record
/// their caller's return address, and a captured stack starts there: how many
/// library frames lie above it depends on the compiler (`allocate_async`
/// tail-calls `do_allocate_async` in an optimized build and leaves no frame),
/// so no fixed count can be skipped. While there are none, the entry points
/// pay one relaxed load.
inline std::atomic<int> call_stack_capturers{0};

[[nodiscard]] inline bool call_sites_wanted() noexcept {
  return call_stack_capturers.load(std::memory_order_relaxed) != 0;
}

/// Records `return_address`, an entry point's caller, as this thread's call
/// site for its lifetime, unless an outer entry point recorded one already
/// (an adaptor's own call upstream keeps the user's call site). While no
/// adaptor captures stacks it records nothing, for one relaxed load.
class call_site_scope {
 public:
  explicit call_site_scope(void* return_address) noexcept
      : outermost_(call_sites_wanted() && enter(return_address)) {}
  ~call_site_scope() {
    if (outermost_) leave();
  }
  call_site_scope(const call_site_scope&) = delete;
  call_site_scope& operator=(const call_site_scope&) = delete;

 private:
  /// Records `return_address` where no call site is recorded; says whether it did.
  static bool enter(void* return_address) noexcept;
  static void leave() noexcept;

  bool outermost_;
};

/// Forgets this thread's call site while the library runs user code in the
/// middle of an allocation (a failure callback), so that what that code
/// allocates records its own; restores it after.
class call_site_suspension {
 public:
  call_site_suspension() noexcept;
  ~call_site_suspension();
  call_site_suspension(const call_site_suspension&) = delete;
  call_site_suspension& operator=(const call_site_suspension&) = delete;

 private:
  void* suspended_;
};

/// Return addresses of the caller of an adaptor's `do_allocate_async`,
/// innermost first, keeping at most `max_frames`: from the call site an entry
/// point recorded (see call_site_scope) where it is on the stack, else
/// leaving out the adaptor's frame and `allocate_async`'s. The unwinding stops
/// once `max_frames` are kept.
[[gnu::noinline]] std::vector<void*> capture_call_stack(int max_frames);

/// One line per frame, each starting with `indent`: glibc's
/// "binary(function+offset) [address]" (function names need `-rdynamic`).
[[nodiscard]] std::string symbolize(const std::vector<void*>& call_stack, std::string_view indent);

/// The frame's symbol as glibc gives it, or its address where there is none.
[[nodiscard]] std::string symbolize_frame(void* frame);

/// A frame as the binary it is in and its function, demangled, with the
/// offset ("cudapmr::test::f(int)+0x1c"); the function is the frame's address
/// where glibc names none (a program linked without -rdynamic).
struct frame_name {
  std::string binary;
  std::string function;
};
[[nodiscard]] frame_name name_frame(void* frame);
/// The same from glibc's text for the frame, "binary(function+offset) [address]".
[[nodiscard]] frame_name name_frame(std::string_view symbol, void* frame);

}  // namespace cudapmr::detail
