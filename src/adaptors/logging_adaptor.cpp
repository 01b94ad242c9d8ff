// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/adaptors/logging_adaptor.hpp"

#include "cudapmr/detail/thread_ordinal.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <new>
#include <ostream>
#include <stdexcept>
#include <utility>

namespace cudapmr {
namespace {

std::unique_ptr<std::ostream> open_log_file(const std::filesystem::path& path) {
  auto file = std::make_unique<std::ofstream>(path, std::ios::out | std::ios::trunc);
  if (!file->is_open())
    throw std::invalid_argument(
        fmt::format("logging_adaptor: cannot open {} for writing: {}", path.string(), std::strerror(errno)));
  return file;
}

}  // namespace

std::string_view to_string(log_action action) noexcept {
  switch (action) {
    case log_action::allocate: return "allocate";
    case log_action::allocate_failed: return "allocate_failed";
    case log_action::deallocate: return "deallocate";
  }
  return "unknown";
}

logging_adaptor::logging_adaptor(stream_ordered_resource& upstream, std::ostream& sink, logging_options options)
    : logging_adaptor(upstream, nullptr, &sink, "a stream", options) {}

logging_adaptor::logging_adaptor(stream_ordered_resource& upstream, const std::filesystem::path& path,
                                 logging_options options)
    : logging_adaptor(upstream, open_log_file(path), nullptr, path.string(), options) {}

logging_adaptor::logging_adaptor(stream_ordered_resource& upstream, std::unique_ptr<std::ostream> owned_sink,
                                 std::ostream* sink, std::string target, logging_options options)
    : resource_adaptor(upstream),
      owned_sink_(std::move(owned_sink)),
      sink_(sink != nullptr ? sink : owned_sink_.get()),
      target_(std::move(target)),
      options_(options),
      start_(std::chrono::steady_clock::now()) {
  buffer_.reserve(options_.buffer_bytes + 256);
  buffer_.append(csv_header);
  buffer_.push_back('\n');
}

logging_adaptor::~logging_adaptor() { flush(); }

std::string logging_adaptor::description() const {
  return describe_as(fmt::format("logging_adaptor (to {})", target_).c_str());
}

void logging_adaptor::flush() noexcept {
  const std::lock_guard lock(mutex_);
  write_buffer();
  try {
    sink_->flush();
  } catch (...) {
    // A sink set to throw on failure; flush() promises not to.
  }
}

void logging_adaptor::write_buffer() noexcept {
  try {
    sink_->write(buffer_.data(), static_cast<std::streamsize>(buffer_.size()));
  } catch (...) {
    // As above: the lines are lost, the program goes on.
  }
  buffer_.clear();
}

void logging_adaptor::log(log_action action, const void* p, std::size_t bytes, std::size_t alignment,
                          stream_ref stream) noexcept {
  const auto elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_);
  const std::uint64_t thread = detail::thread_ordinal();
  const std::lock_guard lock(mutex_);
  try {
    fmt::format_to(std::back_inserter(buffer_), "{},{},{},{},{:#x},{},{},{:#x},{}\n", next_sequence_, elapsed.count(),
                   thread, to_string(action), reinterpret_cast<std::uintptr_t>(p), bytes, alignment,
                   reinterpret_cast<std::uintptr_t>(stream.get()), to_string(kind()));
    ++next_sequence_;
  } catch (const std::bad_alloc&) {
    return;
  }
  if (buffer_.size() >= options_.buffer_bytes) write_buffer();
}

void* logging_adaptor::do_allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) {
  void* p = nullptr;
  try {
    p = upstream_resource().allocate_async(bytes, alignment, stream);
  } catch (const std::bad_alloc&) {
    log(log_action::allocate_failed, nullptr, bytes, alignment, stream);
    throw;
  }
  if (p != nullptr) log(log_action::allocate, p, bytes, alignment, stream);
  return p;
}

void logging_adaptor::do_deallocate_async(void* p, std::size_t bytes, std::size_t alignment,
                                          stream_ref stream) noexcept {
  log(log_action::deallocate, p, bytes, alignment, stream);
  upstream_resource().deallocate_async(p, bytes, alignment, stream);
}

}  // namespace cudapmr
