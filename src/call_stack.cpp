// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/detail/call_stack.hpp"

#include <fmt/format.h>

#include <cxxabi.h>

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

/// Library frames that may lie between this function and the recorded call
/// site: adaptors above the one capturing, each with its entry point.
constexpr int most_library_frames = 32;

}  // namespace

call_site_scope::call_site_scope(void* return_address) noexcept : outermost_(current_call_site == nullptr) {
  if (outermost_) current_call_site = return_address;
}

call_site_scope::~call_site_scope() {
  if (outermost_) current_call_site = nullptr;
}

std::vector<void*> capture_call_stack(int skipped_frames, int max_frames) {
#if CUDAPMR_HAVE_BACKTRACE
  std::vector<void*> frames(static_cast<std::size_t>(max_frames + skipped_frames + 1 + most_library_frames));
  const int depth = ::backtrace(frames.data(), static_cast<int>(frames.size()));
  frames.resize(static_cast<std::size_t>(std::max(depth, 0)));
  auto first = frames.end();
  if (current_call_site != nullptr) first = std::find(frames.begin(), frames.end(), current_call_site);
  if (first == frames.end()) {  // no entry point recorded one, or it is past the frames taken
    const int skipped = skipped_frames + 1;  // this function too
    if (depth <= skipped) return {};
    first = frames.begin() + skipped;
  }
  frames.erase(frames.begin(), first);
  if (frames.size() > static_cast<std::size_t>(max_frames)) frames.resize(static_cast<std::size_t>(max_frames));
  return frames;
#else
  static_cast<void>(skipped_frames);
  static_cast<void>(max_frames);
  return {};
#endif
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

frame_name name_frame(void* frame) {
  const std::string symbol = symbolize_frame(frame);  // "binary(function+offset) [address]"
  const std::size_t open = symbol.find('(');
  const std::size_t close = open == std::string::npos ? open : symbol.find(')', open);
  if (close == std::string::npos) return {"??", symbol};
  const std::string_view inside = std::string_view(symbol).substr(open + 1, close - open - 1);
  const std::size_t plus = inside.rfind('+');
  const std::string mangled(inside.substr(0, plus));
  const std::string_view offset = plus == std::string_view::npos ? std::string_view() : inside.substr(plus);
  frame_name named{symbol.substr(0, open), {}};
  if (mangled.empty()) {
    named.function = fmt::format("{}", frame);
    return named;
  }
  int status = 0;
  const std::unique_ptr<char, decltype(&std::free)> demangled(
      abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), &std::free);
  named.function = std::string(status == 0 && demangled ? demangled.get() : mangled.c_str()) + std::string(offset);
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
