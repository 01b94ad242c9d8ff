// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file tracking_adaptor.hpp
/// Every outstanding allocation (size, alignment, stream, thread, optionally
/// the call stack), leak reports, and detection of bad frees.

#include "cudapmr/adaptors/resource_adaptor.hpp"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace cudapmr {

/// One allocation handed out and not yet freed, as a tracking_adaptor or a
/// history_adaptor records it.
struct allocation_record {
  void* pointer = nullptr;
  std::size_t bytes = 0;
  std::size_t alignment = 0;
  /// The stream it was allocated on (the bound stream for the pmr calls).
  stream_ref stream;
  /// `detail::thread_ordinal()` of the allocating thread.
  std::uint64_t thread = 0;
  /// Its place among all the adaptor's allocations (or events), from 1.
  std::uint64_t sequence = 0;
  /// When it was allocated (steady clock, ns); 0 where the recorder keeps no
  /// time (a tracking_adaptor does not).
  std::uint64_t time_ns = 0;
  /// Return addresses, innermost first; empty unless call stacks are captured.
  std::vector<void*> call_stack;
};

/// The ways a deallocation can be wrong.
enum class misuse_kind {
  unknown_pointer,  ///< never handed out by this adaptor (or freed too long ago to tell)
  double_free,      ///< freed already, and not handed out again since
  wrong_size,       ///< handed out, but with another byte count
  wrong_alignment,  ///< handed out with the same byte count, but another alignment
};

/// "unknown pointer", "double free", "wrong size" or "wrong alignment".
[[nodiscard]] std::string_view to_string(misuse_kind kind) noexcept;

/// A bad deallocation, as caught. The upstream never sees it: the pointer is
/// not freed, and a live allocation stays outstanding.
struct misuse_report {
  misuse_kind kind = misuse_kind::unknown_pointer;
  void* pointer = nullptr;
  std::size_t bytes = 0;
  std::size_t alignment = 0;
  stream_ref stream;
  std::uint64_t thread = 0;
  /// The allocation the pointer belongs to (wrong size or alignment) or
  /// belonged to (double free); empty for an unknown pointer.
  std::optional<allocation_record> allocation;
  /// One line saying all of the above.
  std::string message;
};

/// Thrown by `tracking_adaptor::deallocate_checked`.
class misuse_error : public std::invalid_argument {
 public:
  /// `what()` is the report's message.
  explicit misuse_error(misuse_report report);
  [[nodiscard]] const misuse_report& report() const noexcept { return report_; }

 private:
  misuse_report report_;
};

/// Receives the bad frees caught on the `noexcept` deallocation path. It is
/// called without the adaptor's lock held, possibly from several threads at
/// once; it must not throw (an exception from it is swallowed).
using misuse_handler = std::function<void(const misuse_report&)>;

struct tracking_options {
  /// Record each allocation's call stack (glibc `backtrace`); link with
  /// `-rdynamic` for function names in the leak report.
  bool capture_call_stacks = false;
  /// How many freed pointers are remembered to tell a double free from an
  /// unknown pointer.
  std::size_t freed_history = 4096;
  /// Where bad frees on the `noexcept` path are reported; the default writes
  /// the message to stderr.
  misuse_handler on_misuse;
};

/// Remembers every allocation until it is freed, and checks every free: a
/// pointer it never gave, a double free, a wrong size or alignment are
/// reported and never passed upstream. Thread-safe; one lock per call.
class tracking_adaptor final : public resource_adaptor {
 public:
  /// Tracks what passes through to `upstream`, which must outlive the adaptor.
  explicit tracking_adaptor(stream_ordered_resource& upstream, tracking_options options = {});
  ~tracking_adaptor() override;

  /// Frees like `deallocate_async`, in stream order on `stream`, after
  /// checking the free; a bad one frees nothing.
  /// \throws misuse_error saying what is wrong with the free.
  void deallocate_checked(void* p, std::size_t bytes, std::size_t alignment, stream_ref stream);
  /// As above, with `default_alignment`.
  void deallocate_checked(void* p, std::size_t bytes, stream_ref stream) {
    deallocate_checked(p, bytes, default_alignment, stream);
  }

  /// Every allocation not yet freed, oldest first.
  [[nodiscard]] std::vector<allocation_record> outstanding() const;
  [[nodiscard]] std::size_t outstanding_count() const;
  [[nodiscard]] std::size_t outstanding_bytes() const;
  /// A readable list of the outstanding allocations, with call stacks where
  /// captured; says so in one line when there are none.
  [[nodiscard]] std::string leak_report() const;

  [[nodiscard]] std::string description() const override { return describe_as("tracking_adaptor"); }

 private:
  void* do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) override;
  void do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept override;
  void do_report(resource_state& state) const override;

  /// Checks the free and, when it is right, forgets the allocation: the
  /// caller then frees upstream. Returns the misuse otherwise.
  [[nodiscard]] std::optional<misuse_report> release(void* p, std::size_t bytes, std::size_t alignment,
                                                     stream_ref stream);
  void remember_freed(allocation_record record);

  tracking_options options_;
  mutable std::mutex mutex_;
  std::uint64_t next_sequence_ = 1;
  std::size_t outstanding_bytes_ = 0;
  std::unordered_map<void*, allocation_record> live_;
  /// Recently freed allocations, and the order to forget them in.
  std::unordered_map<void*, allocation_record> freed_;
  std::deque<std::pair<void*, std::uint64_t>> freed_order_;
};

}  // namespace cudapmr
