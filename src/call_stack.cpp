// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/detail/call_stack.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <iterator>
#include <memory>

#if __has_include(<execinfo.h>)
#include <execinfo.h>
#define CUDAPMR_HAVE_BACKTRACE 1
#else
#define CUDAPMR_HAVE_BACKTRACE 0
#endif

namespace cudapmr::detail {

std::vector<void*> capture_call_stack(int skipped_frames, int max_frames) {
#if CUDAPMR_HAVE_BACKTRACE
  std::vector<void*> frames(static_cast<std::size_t>(max_frames + skipped_frames + 1));
  const int depth = ::backtrace(frames.data(), static_cast<int>(frames.size()));
  const int skipped = skipped_frames + 1;  // this function too
  if (depth <= skipped) return {};
  frames.resize(static_cast<std::size_t>(depth));
  frames.erase(frames.begin(), frames.begin() + skipped);
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

std::string symbolize_frame(void* frame) {
#if CUDAPMR_HAVE_BACKTRACE
  const std::unique_ptr<char*, decltype(&std::free)> symbols(::backtrace_symbols(&frame, 1), &std::free);
  if (symbols) return symbols.get()[0];
#endif
  return fmt::format("{}", frame);
}

}  // namespace cudapmr::detail
