// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/detail/call_stack.hpp"

#include <fmt/format.h>

#include <cxxabi.h>
#include <unwind.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <string_view>

#if __has_include(<execinfo.h>)
#include <execinfo.h>
#define CUDAPMR_HAVE_BACKTRACE 1
#else
#define CUDAPMR_HAVE_BACKTRACE 0
#endif

namespace cudapmr::detail {
namespace {

thread_local void* current_call_site = nullptr;

/// The frames skipped where no call site is recorded: this function's, the
/// adaptor's do_allocate_async and allocate_async.
constexpr int fallback_skipped_frames = 3;

/// Library frames that may lie between this function and the recorded call
/// site: adaptors above the one capturing, each with its entry point.
constexpr int most_library_frames = 32;

/// One walk up the stack: the frames from the recorded call site on, and,
/// in case it is not found, the frames past the `skipped` innermost ones.
struct stack_walk {
  void* call_site;
  int skipped;
  int max_frames;
  int search_limit;
  int seen = 0;
  bool found = false;
  std::vector<void*> from_call_site;
  std::vector<void*> past_skipped;
};

_Unwind_Reason_Code visit_frame(_Unwind_Context* context, void* argument) {
  stack_walk& walk = *static_cast<stack_walk*>(argument);
  void* const frame = reinterpret_cast<void*>(_Unwind_GetIP(context));
  if (frame == nullptr) return _URC_END_OF_STACK;
  const auto max_frames = static_cast<std::size_t>(walk.max_frames);
  if (walk.found || frame == walk.call_site) {
    walk.found = true;
    walk.from_call_site.push_back(frame);
    return walk.from_call_site.size() < max_frames ? _URC_NO_REASON : _URC_END_OF_STACK;
  }
  if (walk.seen++ >= walk.skipped && walk.past_skipped.size() < max_frames) walk.past_skipped.push_back(frame);
  if (walk.call_site == nullptr && walk.past_skipped.size() >= max_frames) return _URC_END_OF_STACK;
  return walk.seen < walk.search_limit ? _URC_NO_REASON : _URC_END_OF_STACK;
}

}  // namespace

bool call_site_scope::enter(void* return_address) noexcept {
  if (current_call_site != nullptr) return false;
  current_call_site = return_address;
  return true;
}

void call_site_scope::leave() noexcept { current_call_site = nullptr; }

call_site_suspension::call_site_suspension() noexcept : suspended_(current_call_site) { current_call_site = nullptr; }

call_site_suspension::~call_site_suspension() { current_call_site = suspended_; }

std::vector<void*> capture_call_stack(int max_frames) {
  if (max_frames <= 0) return {};
  // The first frame the unwinder reports is this function's, as glibc's backtrace's first is.
  stack_walk walk{.call_site = current_call_site,
                  .skipped = fallback_skipped_frames,
                  .max_frames = max_frames,
                  .search_limit = fallback_skipped_frames + max_frames + most_library_frames};
  _Unwind_Backtrace(&visit_frame, &walk);
  return walk.found ? std::move(walk.from_call_site) : std::move(walk.past_skipped);
}

std::string symbolize(const std::vector<void*>& call_stack, std::string_view indent) {
  std::string lines;
#if CUDAPMR_HAVE_BACKTRACE
  if (call_stack.empty()) return lines;
  const std::unique_ptr<char*, decltype(&std::free)> symbols(
      ::backtrace_symbols(call_stack.data(), static_cast<int>(call_stack.size())), &std::free);
  for (std::size_t i = 0; i < call_stack.size(); ++i) {
    if (symbols) fmt::format_to(std::back_inserter(lines), "{}at {}\n", indent, symbols.get()[i]);
    else fmt::format_to(std::back_inserter(lines), "{}at {}\n", indent, call_stack[i]);
  }
#else
  static_cast<void>(call_stack);
  static_cast<void>(indent);
#endif
  return lines;
}

frame_name name_frame(void* frame) { return name_frame(symbolize_frame(frame), frame); }

frame_name name_frame(std::string_view symbol, void* frame) {
  // Read from the right: a binary's path may hold parentheses; the function
  // may be missing, its offset negative.
  const std::size_t bracket = symbol.rfind(" [");
  const std::string_view located = symbol.substr(0, bracket);
  frame_name named{"??", fmt::format("{}", frame)};
  const std::size_t open = located.ends_with(')') ? located.rfind('(') : std::string_view::npos;
  if (open == std::string_view::npos) {
    if (!located.empty() && bracket != std::string_view::npos) named.binary = std::string(located);
    return named;
  }
  named.binary = std::string(located.substr(0, open));
  const std::string_view inside = located.substr(open + 1, located.size() - open - 2);
  const std::size_t sign = inside.find_last_of("+-");
  const std::string mangled(inside.substr(0, sign));
  if (mangled.empty()) return named;
  const std::string_view offset = sign == std::string_view::npos ? std::string_view() : inside.substr(sign);
  int status = -1;
  // Only C++ names: __cxa_demangle would also read a C function "f" as the type float.
  const std::unique_ptr<char, decltype(&std::free)> demangled(
      mangled.starts_with("_Z") ? abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status) : nullptr,
      &std::free);
  named.function = (status == 0 && demangled ? std::string(demangled.get()) : mangled) + std::string(offset);
  return named;
}

std::string symbolize_frame(void* frame) {
#if CUDAPMR_HAVE_BACKTRACE
  const std::unique_ptr<char*, decltype(&std::free)> symbols(::backtrace_symbols(&frame, 1), &std::free);
  if (symbols) return symbols.get()[0];
#endif
  return fmt::format("{}", frame);
}

}  // namespace cudapmr::detail
