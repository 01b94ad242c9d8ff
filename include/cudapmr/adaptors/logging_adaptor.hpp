// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file logging_adaptor.hpp
/// One CSV line per allocation event, buffered, to a file or a stream; the
/// `replay` program plays such a log back against any resource.

#include "cudapmr/adaptors/resource_adaptor.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace cudapmr {

/// What a log line records.
enum class log_action {
  allocate,         ///< an allocation succeeded
  allocate_failed,  ///< an allocation was refused (out of memory); its pointer is 0
  deallocate,       ///< a deallocation
};

/// "allocate", "allocate_failed" or "deallocate", as written in the log.
[[nodiscard]] std::string_view to_string(log_action action) noexcept;

struct logging_options {
  /// Lines are written to the sink whenever this many bytes are buffered.
  std::size_t buffer_bytes = 64 * 1024;
};

/// Writes one CSV line per event that passes through it:
///
///     sequence,time_ns,thread,action,pointer,bytes,alignment,stream,kind
///     1,5120,1,allocate,0x7f3a00000000,1048576,256,0x55d0c2a3f010,device
///
/// `sequence` orders the events across threads (lines are also written in
/// that order); `time_ns` counts from the adaptor's construction; `thread` is
/// `detail::thread_ordinal()`; `pointer` and `stream` are hexadecimal; `kind`
/// is the upstream's memory kind. An allocation is logged once it has
/// succeeded, a deallocation before the upstream frees, so that a pointer is
/// always freed in the log before it is handed out again. Zero-byte requests
/// (null pointers) are not logged. Lines are buffered under one lock and
/// written in large blocks. Thread-safe.
class logging_adaptor final : public resource_adaptor {
 public:
  /// The first line of every log.
  static constexpr std::string_view csv_header = "sequence,time_ns,thread,action,pointer,bytes,alignment,stream,kind";

  /// Logs to `sink`, which must outlive the adaptor; the header is written first.
  logging_adaptor(stream_ordered_resource& upstream, std::ostream& sink, logging_options options = {});
  /// Logs to a new file at `path` (replacing one there).
  /// \throws std::invalid_argument naming the path and the system's reason when it cannot be opened.
  logging_adaptor(stream_ordered_resource& upstream, const std::filesystem::path& path, logging_options options = {});
  /// Writes what is still buffered.
  ~logging_adaptor() override;

  /// Writes the buffered lines to the sink and flushes it. Never throws; a
  /// sink in a failed state is left so.
  void flush() noexcept;

  /// "logging_adaptor (to <where>) over <upstream>".
  [[nodiscard]] std::string description() const override;

 private:
  /// `sink` when given, else the owned one.
  logging_adaptor(stream_ordered_resource& upstream, std::unique_ptr<std::ostream> owned_sink, std::ostream* sink,
                  std::string target, logging_options options);

  void* do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) override;
  void do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept override;

  /// Appends one line; a line that cannot be buffered (no memory) is dropped.
  void log(log_action action, const void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept;
  /// Called with the lock held.
  void write_buffer() noexcept;

  std::unique_ptr<std::ostream> owned_sink_;  // set when logging to a file
  std::ostream* sink_;
  std::string target_;
  logging_options options_;
  std::chrono::steady_clock::time_point start_;
  std::mutex mutex_;
  std::string buffer_;
  std::uint64_t next_sequence_ = 1;
};

}  // namespace cudapmr
