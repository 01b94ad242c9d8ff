// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/adaptors/tracking_adaptor.hpp"

#include "cudapmr/detail/call_stack.hpp"
#include "cudapmr/detail/thread_ordinal.hpp"
#include "cudapmr/interop/format.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <utility>

namespace cudapmr {
namespace {

constexpr int max_frames = 64;

/// "allocation #5 of 1024 bytes (alignment 256) on stream 0x0 by thread 2".
std::string describe_allocation(const allocation_record& record) {
  return fmt::format("allocation #{} of {} bytes (alignment {}) on stream {} by thread {}", record.sequence,
                     record.bytes, record.alignment, fmt::ptr(record.stream.get()), record.thread);
}

std::string misuse_message(const std::string& resource, const misuse_report& report) {
  const std::string free_call = fmt::format("free of {} ({} bytes, alignment {}, stream {}, thread {})",
                                            fmt::ptr(report.pointer), report.bytes, report.alignment,
                                            fmt::ptr(report.stream.get()), report.thread);
  switch (report.kind) {
    case misuse_kind::unknown_pointer:
      return fmt::format("{}: unknown pointer: {}: this adaptor never handed it out, or freed it too long ago to "
                         "remember",
                         resource, free_call);
    case misuse_kind::double_free:
      return fmt::format("{}: double free: {}: {} was freed already", resource, free_call,
                         describe_allocation(*report.allocation));
    case misuse_kind::wrong_size:
      return fmt::format("{}: wrong size: {}: {} bytes given, but {}", resource, free_call, report.bytes,
                         describe_allocation(*report.allocation));
    case misuse_kind::wrong_alignment:
      return fmt::format("{}: wrong alignment: {}: alignment {} given, but {}", resource, free_call,
                         report.alignment, describe_allocation(*report.allocation));
  }
  return resource;
}

void print_to_stderr(const misuse_report& report) { fmt::print(stderr, "cudapmr: {}\n", report.message); }

}  // namespace

std::string_view to_string(misuse_kind kind) noexcept {
  switch (kind) {
    case misuse_kind::unknown_pointer: return "unknown pointer";
    case misuse_kind::double_free: return "double free";
    case misuse_kind::wrong_size: return "wrong size";
    case misuse_kind::wrong_alignment: return "wrong alignment";
  }
  return "unknown misuse";
}

misuse_error::misuse_error(misuse_report report)
    : std::invalid_argument(report.message), report_(std::move(report)) {}

tracking_adaptor::tracking_adaptor(stream_ordered_resource& upstream, tracking_options options)
    : resource_adaptor(upstream), options_(std::move(options)) {
  if (!options_.on_misuse) options_.on_misuse = print_to_stderr;
  if (options_.capture_call_stacks) detail::call_stack_capturers.fetch_add(1, std::memory_order_relaxed);
}

tracking_adaptor::~tracking_adaptor() {
  if (options_.capture_call_stacks) detail::call_stack_capturers.fetch_sub(1, std::memory_order_relaxed);
}

void* tracking_adaptor::do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) {
  std::vector<void*> call_stack;
  if (options_.capture_call_stacks) call_stack = detail::capture_call_stack(max_frames);
  void* p = upstream_resource().allocate_async(bytes, alignment, stream);
  if (p == nullptr) return p;  // zero bytes: nothing to free, nothing to track
  try {
    const std::lock_guard lock(mutex_);
    freed_.erase(p);  // the address is live again: a free of it is no longer a double free
    live_.insert_or_assign(p, allocation_record{p, bytes, alignment, stream, detail::thread_ordinal(),
                                                next_sequence_++, 0, std::move(call_stack)});
    outstanding_bytes_ += bytes;
  } catch (...) {
    upstream_resource().deallocate_async(p, bytes, alignment, stream);
    throw;
  }
  return p;
}

std::optional<misuse_report> tracking_adaptor::release(void* p, std::size_t bytes, std::size_t alignment,
                                                       stream_ref stream) {
  misuse_report report{misuse_kind::unknown_pointer, p, bytes, alignment, stream, detail::thread_ordinal(), {}, {}};
  {
    const std::lock_guard lock(mutex_);
    if (const auto live = live_.find(p); live != live_.end()) {
      if (live->second.bytes == bytes && live->second.alignment == alignment) {
        // Forgotten before the upstream frees, so that a thread given the
        // same address next is never mistaken for this allocation.
        outstanding_bytes_ -= bytes;
        remember_freed(std::move(live->second));
        live_.erase(live);
        return std::nullopt;
      }
      report.kind = live->second.bytes != bytes ? misuse_kind::wrong_size : misuse_kind::wrong_alignment;
      report.allocation = live->second;
    } else if (const auto freed = freed_.find(p); freed != freed_.end()) {
      report.kind = misuse_kind::double_free;
      report.allocation = freed->second;
    }
  }
  report.message = misuse_message(description(), report);
  return report;
}

void tracking_adaptor::remember_freed(allocation_record record) {
  if (options_.freed_history == 0) return;
  const std::uint64_t sequence = record.sequence;
  void* const p = record.pointer;
  record.call_stack.clear();
  record.call_stack.shrink_to_fit();
  freed_.insert_or_assign(p, std::move(record));
  freed_order_.emplace_back(p, sequence);
  while (freed_order_.size() > options_.freed_history) {
    const auto [oldest, oldest_sequence] = freed_order_.front();
    freed_order_.pop_front();
    // The address may have been handed out and freed again since; forget only this free.
    if (const auto found = freed_.find(oldest); found != freed_.end() && found->second.sequence == oldest_sequence)
      freed_.erase(found);
  }
}

void tracking_adaptor::deallocate_checked(void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) {
  if (p == nullptr) return;
  if (std::optional<misuse_report> misuse = release(p, bytes, alignment, stream)) throw misuse_error(std::move(*misuse));
  upstream_resource().deallocate_async(p, bytes, alignment, stream);
}

void tracking_adaptor::do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment,
                                           stream_ref stream) noexcept {
  try {
    if (const std::optional<misuse_report> misuse = release(p, bytes, alignment, stream)) {
      options_.on_misuse(*misuse);
      return;
    }
  } catch (...) {
    // Out of memory while checking or reporting: the free cannot be vouched
    // for, so it is not passed upstream; at worst the memory leaks.
    return;
  }
  upstream_resource().deallocate_async(p, bytes, alignment, stream);
}

std::vector<allocation_record> tracking_adaptor::outstanding() const {
  std::vector<allocation_record> records;
  {
    const std::lock_guard lock(mutex_);
    records.reserve(live_.size());
    for (const auto& [pointer, record] : live_) records.push_back(record);
  }
  std::sort(records.begin(), records.end(),
            [](const allocation_record& a, const allocation_record& b) { return a.sequence < b.sequence; });
  return records;
}

std::size_t tracking_adaptor::outstanding_count() const {
  const std::lock_guard lock(mutex_);
  return live_.size();
}

void tracking_adaptor::do_report(resource_state& state) const { state.used_bytes = outstanding_bytes(); }

std::size_t tracking_adaptor::outstanding_bytes() const {
  const std::lock_guard lock(mutex_);
  return outstanding_bytes_;
}

std::string tracking_adaptor::leak_report() const {
  const std::vector<allocation_record> records = outstanding();
  if (records.empty()) return fmt::format("{}: no allocations outstanding\n", description());
  std::size_t bytes = 0;
  for (const allocation_record& record : records) bytes += record.bytes;
  std::string report = fmt::format("{}: {} allocation{} outstanding, {} in all\n", description(), records.size(),
                                   records.size() == 1 ? "" : "s", human_bytes(bytes));
  for (const allocation_record& record : records) {
    fmt::format_to(std::back_inserter(report), "  {} at {}\n", describe_allocation(record), fmt::ptr(record.pointer));
    report += detail::symbolize(record.call_stack, "      ");
  }
  return report;
}

}  // namespace cudapmr
