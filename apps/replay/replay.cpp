// SPDX-License-Identifier: Apache-2.0
#include "replay.hpp"

#include <cudapmr/device.hpp>
#include <cudapmr/stream.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <exception>
#include <fstream>
#include <istream>
#include <limits>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>

namespace replay {
namespace {

// ---- reading ----------------------------------------------------------------

[[noreturn]] void throw_bad_line(std::size_t line_number, std::string_view what, std::string_view line) {
  throw std::invalid_argument(fmt::format("replay log line {}: {}: '{}'", line_number, what, line));
}

template <class Integer>
Integer parse_number(std::string_view field, std::string_view name, std::size_t line_number, std::string_view line) {
  int base = 10;
  if (field.starts_with("0x")) {
    field.remove_prefix(2);
    base = 16;
  }
  Integer value{};
  const auto [end, error] = std::from_chars(field.data(), field.data() + field.size(), value, base);
  if (error != std::errc{} || end != field.data() + field.size() || field.empty())
    throw_bad_line(line_number, fmt::format("the {} is not a number", name), line);
  return value;
}

cudapmr::log_action parse_action(std::string_view field, std::size_t line_number, std::string_view line) {
  for (const cudapmr::log_action action :
       {cudapmr::log_action::allocate, cudapmr::log_action::allocate_failed, cudapmr::log_action::deallocate})
    if (field == to_string(action)) return action;
  throw_bad_line(line_number, fmt::format("unknown action '{}'", field), line);
}

event parse_event(std::string_view line, std::size_t line_number) {
  constexpr std::size_t columns = 9;
  std::string_view fields[columns];
  std::size_t count = 0;
  for (std::string_view rest = line;; ++count) {
    const std::size_t comma = rest.find(',');
    if (count < columns) fields[count] = rest.substr(0, comma);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (count + 1 != columns) throw_bad_line(line_number, fmt::format("{} fields, not {}", count + 1, columns), line);
  event parsed;
  parsed.sequence = parse_number<std::uint64_t>(fields[0], "sequence", line_number, line);
  parsed.time_ns = parse_number<std::uint64_t>(fields[1], "time", line_number, line);
  parsed.thread = parse_number<std::uint64_t>(fields[2], "thread", line_number, line);
  parsed.action = parse_action(fields[3], line_number, line);
  parsed.pointer = parse_number<std::uintptr_t>(fields[4], "pointer", line_number, line);
  parsed.bytes = parse_number<std::size_t>(fields[5], "byte count", line_number, line);
  parsed.alignment = parse_number<std::size_t>(fields[6], "alignment", line_number, line);
  parsed.stream = parse_number<std::uintptr_t>(fields[7], "stream", line_number, line);
  return parsed;
}

// ---- replaying --------------------------------------------------------------

/// Hands the turn from event to event across the replay threads.
class turns {
 public:
  /// Waits until event `rank` may run; false once the replay is stopping.
  bool wait_for(std::size_t rank) {
    std::size_t current = next_.load(std::memory_order_acquire);
    while (current != rank) {
      if (current == stopped) return false;
      next_.wait(current, std::memory_order_acquire);
      current = next_.load(std::memory_order_acquire);
    }
    return true;
  }
  void pass(std::size_t rank) {
    next_.store(rank + 1, std::memory_order_release);
    next_.notify_all();
  }
  void stop() {
    next_.store(stopped, std::memory_order_release);
    next_.notify_all();
  }

 private:
  static constexpr std::size_t stopped = std::numeric_limits<std::size_t>::max();
  std::atomic<std::size_t> next_{0};
};

/// A replayed allocation; `p` is null when the replay could not allocate it.
struct live_allocation {
  void* p;
  std::size_t bytes;
  std::size_t alignment;
  cudapmr::stream_ref stream;
};

/// The state the replay threads share. Only the thread whose turn it is
/// touches it; the turn's release/acquire hand-off orders the accesses.
class replayer {
 public:
  replayer(std::span<const event> events, cudapmr::stream_ordered_resource& target)
      : events_(events), target_(target) {
    const bool pageable = target.kind() == cudapmr::memory_kind::pageable;
    const int device = pageable ? -1 : (target.device_id() >= 0 ? target.device_id() : cudapmr::device::current().ordinal());
    for (const event& logged : events) {
      if (streams_.contains(logged.stream)) continue;
      if (pageable) {
        streams_.emplace(logged.stream, std::nullopt);
      } else {
        streams_.emplace(logged.stream, cudapmr::stream(device));
      }
    }
  }

  std::size_t stream_count() const noexcept { return streams_.size(); }

  /// Runs the events of one logged thread, `ranks` in increasing order.
  void run_thread(const std::vector<std::size_t>& ranks) {
    for (const std::size_t rank : ranks) {
      if (!turns_.wait_for(rank)) return;
      try {
        run_event(events_[rank]);
      } catch (...) {
        const std::lock_guard lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
        turns_.stop();
        return;
      }
      turns_.pass(rank);
    }
  }

  /// Frees what the log left outstanding, waits for every stream, and
  /// rethrows the first error a replay thread met.
  void finish(result& outcome) {
    for (const auto& [pointer, allocation] : live_) {
      ++outcome.left_outstanding;
      target_.deallocate_async(allocation.p, allocation.bytes, allocation.alignment, allocation.stream);
    }
    live_.clear();
    for (const auto& [logged, replayed] : streams_)
      if (replayed) replayed->synchronize();
    if (error_) std::rethrow_exception(error_);
    outcome.failures = failures_;
    outcome.logged_failures = logged_failures_;
    outcome.unmatched_frees = unmatched_frees_;
    outcome.first_refusal = std::move(first_refusal_);
  }

 private:
  cudapmr::stream_ref stream_for(std::uintptr_t logged) const {
    const std::optional<cudapmr::stream>& replayed = streams_.at(logged);
    return replayed ? replayed->ref() : cudapmr::stream_ref{};
  }

  /// Allocates, counting a refusal; null when refused.
  void* try_allocate(const event& logged, cudapmr::stream_ref stream) {
    try {
      return target_.allocate_async(logged.bytes, logged.alignment, stream);
    } catch (const std::bad_alloc& error) {
      if (failures_++ == 0) first_refusal_ = error.what();
      return nullptr;
    }
  }

  void run_event(const event& logged) {
    const cudapmr::stream_ref stream = stream_for(logged.stream);
    switch (logged.action) {
      case cudapmr::log_action::allocate:
        live_[logged.pointer] = {try_allocate(logged, stream), logged.bytes, logged.alignment, stream};
        break;
      case cudapmr::log_action::allocate_failed:
        ++logged_failures_;
        if (void* p = try_allocate(logged, stream)) target_.deallocate_async(p, logged.bytes, logged.alignment, stream);
        break;
      case cudapmr::log_action::deallocate: {
        const auto found = live_.find(logged.pointer);
        if (found == live_.end()) {
          ++unmatched_frees_;
          break;
        }
        // The log's size and alignment, so that a tracking adaptor on the target sees the log's mistakes.
        target_.deallocate_async(found->second.p, logged.bytes, logged.alignment, stream);
        live_.erase(found);
        break;
      }
    }
  }

  std::span<const event> events_;
  cudapmr::stream_ordered_resource& target_;
  std::map<std::uintptr_t, std::optional<cudapmr::stream>> streams_;
  std::unordered_map<std::uintptr_t, live_allocation> live_;
  std::size_t failures_ = 0;
  std::size_t logged_failures_ = 0;
  std::size_t unmatched_frees_ = 0;
  std::string first_refusal_;
  turns turns_;
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

// ---- the synthetic workload ---------------------------------------------------

struct handed_over {
  void* p;
  std::size_t bytes;
  std::size_t alignment;
  cudapmr::stream_ref stream;
};

}  // namespace

std::vector<event> read_log(std::istream& in) {
  std::string line;
  if (!std::getline(in, line) || line != cudapmr::logging_adaptor::csv_header)
    throw_bad_line(1, fmt::format("not a logging_adaptor log: the header should be '{}'",
                                  cudapmr::logging_adaptor::csv_header),
                   line);
  std::vector<event> events;
  for (std::size_t line_number = 2; std::getline(in, line); ++line_number)
    if (!line.empty()) events.push_back(parse_event(line, line_number));
  std::sort(events.begin(), events.end(), [](const event& a, const event& b) { return a.sequence < b.sequence; });
  const auto repeated = std::adjacent_find(events.begin(), events.end(),
                                           [](const event& a, const event& b) { return a.sequence == b.sequence; });
  if (repeated != events.end())
    throw std::invalid_argument(fmt::format("replay log: sequence number {} appears twice", repeated->sequence));
  return events;
}

std::vector<event> read_log(const std::filesystem::path& path) {
  std::ifstream file(path);
  if (!file) throw std::invalid_argument(fmt::format("replay log {}: cannot be opened for reading", path.string()));
  try {
    return read_log(file);
  } catch (const std::invalid_argument& error) {
    throw std::invalid_argument(fmt::format("{}: {}", path.string(), error.what()));
  }
}

std::size_t peak_bytes(std::span<const event> events) {
  std::unordered_map<std::uintptr_t, std::size_t> live;
  std::size_t current = 0;
  std::size_t peak = 0;
  for (const event& logged : events) {
    if (logged.action == cudapmr::log_action::allocate) {
      live[logged.pointer] = logged.bytes;
      current += logged.bytes;
      peak = std::max(peak, current);
    } else if (logged.action == cudapmr::log_action::deallocate) {
      if (const auto found = live.find(logged.pointer); found != live.end()) {
        current -= found->second;
        live.erase(found);
      }
    }
  }
  return peak;
}

result run(std::span<const event> events, cudapmr::stream_ordered_resource& target) {
  cudapmr::statistics_adaptor counted(target);
  replayer replay(events, counted);
  std::map<std::uint64_t, std::vector<std::size_t>> ranks_by_thread;
  for (std::size_t rank = 0; rank < events.size(); ++rank) ranks_by_thread[events[rank].thread].push_back(rank);

  result outcome;
  outcome.events = events.size();
  outcome.threads = ranks_by_thread.size();
  outcome.streams = replay.stream_count();
  const auto start = std::chrono::steady_clock::now();
  {
    std::vector<std::jthread> threads;
    threads.reserve(ranks_by_thread.size());
    for (const auto& [thread, ranks] : ranks_by_thread)
      threads.emplace_back([&replay, &ranks = ranks] { replay.run_thread(ranks); });
  }
  replay.finish(outcome);
  outcome.elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);
  outcome.statistics = counted.statistics();
  return outcome;
}

void run_workload(cudapmr::stream_ordered_resource& resource, const workload_options& options) {
  const bool pageable = resource.kind() == cudapmr::memory_kind::pageable;
  const int device = pageable ? -1 : (resource.device_id() >= 0 ? resource.device_id() : cudapmr::device::current().ordinal());
  std::vector<std::optional<cudapmr::stream>> streams(options.threads);
  if (!pageable)
    for (std::optional<cudapmr::stream>& own : streams) own.emplace(device);

  std::mutex turn;  // one event at a time, see the header
  std::vector<handed_over> mailbox;
  std::exception_ptr error;
  auto work = [&](std::size_t index) {
    const cudapmr::stream_ref stream = streams[index] ? streams[index]->ref() : cudapmr::stream_ref{};
    std::mt19937_64 random(options.seed * 1000003 + index);
    std::uniform_int_distribution<std::size_t> size(1, options.max_bytes);
    std::uniform_int_distribution<int> alignment_power(0, 12);  // 1 B to 4 KiB
    std::vector<handed_over> mine;
    auto free_one = [&](std::vector<handed_over>& from, std::size_t position) {
      const handed_over freed = from[position];
      from.erase(from.begin() + static_cast<std::ptrdiff_t>(position));
      resource.deallocate_async(freed.p, freed.bytes, freed.alignment, freed.stream);
    };
    try {
      for (std::size_t i = 0; i < options.allocations_per_thread; ++i) {
        const std::lock_guard lock(turn);
        const std::size_t bytes = size(random);
        const std::size_t alignment = std::size_t{1} << alignment_power(random);
        mine.push_back({resource.allocate_async(bytes, alignment, stream), bytes, alignment, stream});
        if (random() % 8 == 0) {
          mailbox.push_back(mine.back());
          mine.pop_back();
        }
        if (!mailbox.empty() && random() % 8 == 0) free_one(mailbox, random() % mailbox.size());
        if (mine.size() > options.live_per_thread) free_one(mine, random() % mine.size());
      }
    } catch (...) {
      const std::lock_guard lock(turn);
      if (!error) error = std::current_exception();
    }
    // Whoever finishes last finds the mailbox holding what is left to free.
    const std::lock_guard lock(turn);
    while (!mine.empty()) free_one(mine, mine.size() - 1);
    while (!mailbox.empty()) free_one(mailbox, mailbox.size() - 1);
  };
  {
    std::vector<std::jthread> threads;
    for (std::size_t index = 0; index < options.threads; ++index) threads.emplace_back(work, index);
  }
  for (const std::optional<cudapmr::stream>& own : streams)
    if (own) own->synchronize();
  if (error) std::rethrow_exception(error);
}

}  // namespace replay
