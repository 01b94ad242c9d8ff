// SPDX-License-Identifier: Apache-2.0
// The writers are our own: the JSON is flat enough for a few lines, and no
// C++ library Debian ships writes pickles.
#include "cudapmr/snapshot_export.hpp"

#include "cudapmr/detail/call_stack.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <stdexcept>
#include <unordered_map>
#include <vector>

namespace cudapmr {
namespace {

// ---- UTF-8 ------------------------------------------------------------------

/// The UTF-8 replacement character, U+FFFD.
constexpr std::string_view replacement_character = "\xef\xbf\xbd";

/// The bytes at the start of a text that one step of decoding takes: a
/// well-formed sequence, or an ill-formed one that one U+FFFD replaces.
struct utf8_sequence {
  std::size_t length;
  bool valid;
};

/// The sequence at the start of `text` (not empty), by the table of
/// well-formed byte sequences of the Unicode standard (section 3.9): no
/// overlong form, no surrogate, nothing past U+10FFFF. An ill-formed one is
/// its longest prefix of a well-formed sequence, else one byte, as Python's
/// "replace" decoding takes it.
utf8_sequence next_utf8_sequence(std::string_view text) noexcept {
  const auto lead = static_cast<unsigned char>(text[0]);
  if (lead < 0x80) return {1, true};
  std::size_t length = 0;
  unsigned char low = 0x80;  // the second byte's range, narrowed for some leads
  unsigned char high = 0xbf;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) low = 0xa0;   // below: overlong
    if (lead == 0xed) high = 0x9f;  // above: surrogates
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) low = 0x90;   // below: overlong
    if (lead == 0xf4) high = 0x8f;  // above: past U+10FFFF
  } else {
    return {1, false};  // a continuation byte, an overlong lead (C0, C1), or F5..FF
  }
  for (std::size_t i = 1; i < length; ++i) {
    if (i >= text.size()) return {i, false};  // cut off
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < low || byte > high) return {i, false};
    low = 0x80;
    high = 0xbf;
  }
  return {length, true};
}

/// Takes the next sequence off `text` (not empty): the sequence where it is
/// well-formed, else U+FFFD. JSON and pickle's unicode strings must be valid
/// UTF-8, and names (of resources, annotations, symbols) may be any bytes.
std::string_view take_utf8_sequence(std::string_view& text) noexcept {
  const utf8_sequence sequence = next_utf8_sequence(text);
  const std::string_view taken = sequence.valid ? text.substr(0, sequence.length) : replacement_character;
  text.remove_prefix(sequence.length);
  return taken;
}

// ---- JSON -------------------------------------------------------------------

/// A streaming JSON writer: values in order, commas where they belong.
class json_writer {
 public:
  void begin_object() { open('{'); }
  void end_object() { close('}'); }
  void begin_array() { open('['); }
  void end_array() { close(']'); }
  /// The next member's name; its value follows.
  void key(std::string_view name) {
    separate();
    string_literal(name);
    text_ += ':';
    after_key_ = true;
  }
  void value(std::string_view text) {
    separate();
    string_literal(text);
  }
  void value(const char* text) { value(std::string_view(text)); }
  void value(std::uint64_t number) {
    separate();
    fmt::format_to(std::back_inserter(text_), "{}", number);
  }
  void value(std::int64_t number) {
    separate();
    fmt::format_to(std::back_inserter(text_), "{}", number);
  }
  void value(int number) { value(static_cast<std::int64_t>(number)); }
  void value(double number) {
    separate();
    fmt::format_to(std::back_inserter(text_), "{:.3f}", number);
  }
  void value(bool truth) {
    separate();
    text_ += truth ? "true" : "false";
  }
  void null() {
    separate();
    text_ += "null";
  }
  template <class Number>
  void member(std::string_view name, Number number) {
    key(name);
    value(number);
  }
  /// A member whose value is null when empty.
  template <class Number>
  void optional_member(std::string_view name, const std::optional<Number>& number) {
    key(name);
    if (number) value(*number);
    else null();
  }
  [[nodiscard]] std::string take() { return std::move(text_); }

 private:
  void open(char bracket) {
    separate();
    text_ += bracket;
    first_ = true;
  }
  void close(char bracket) {
    text_ += bracket;
    first_ = false;
  }
  void separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (!first_) text_ += ',';
    first_ = false;
  }
  void string_literal(std::string_view text) {
    text_ += '"';
    while (!text.empty()) {
      const std::string_view sequence = take_utf8_sequence(text);
      if (sequence.size() != 1) {  // past ASCII: nothing to escape
        text_ += sequence;
        continue;
      }
      const char c = sequence.front();
      switch (c) {
        case '"': text_ += "\\\""; break;
        case '\\': text_ += "\\\\"; break;
        case '\n': text_ += "\\n"; break;
        case '\t': text_ += "\\t"; break;
        case '\r': text_ += "\\r"; break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) fmt::format_to(std::back_inserter(text_), "\\u{:04x}", c);
          else text_ += c;
      }
    }
    text_ += '"';
  }

  std::string text_;
  bool first_ = true;
  bool after_key_ = false;
};

std::uint64_t address(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p); }
std::uint64_t address(stream_ref stream) noexcept { return reinterpret_cast<std::uintptr_t>(stream.get()); }

void write_call_stack(json_writer& json, const std::vector<void*>& call_stack) {
  json.key("call_stack");
  json.begin_array();
  for (void* frame : call_stack) json.value(address(frame));
  json.end_array();
}

/// The members a live block and an event share (an allocation_record or a history_event).
template <class Record>
void write_record_members(json_writer& json, const Record& record) {
  json.member("sequence", record.sequence);
  json.member("time_ns", record.time_ns);
  json.member("thread", record.thread);
  json.member("address", address(record.pointer));
  json.member("bytes", static_cast<std::uint64_t>(record.bytes));
  json.member("alignment", static_cast<std::uint64_t>(record.alignment));
  json.member("stream", address(record.stream));
  write_call_stack(json, record.call_stack);
}

/// `name`: an array with one object per item, whose members `write_members` writes.
template <class Range, class WriteMembers>
void write_objects(json_writer& json, std::string_view name, const Range& items, WriteMembers write_members) {
  json.key(name);
  json.begin_array();
  for (const auto& item : items) {
    json.begin_object();
    write_members(item);
    json.end_object();
  }
  json.end_array();
}

void write_resource_members(json_writer& json, const resource_state& state) {
  json.member("name", std::string_view(state.name));
  json.member("kind", to_string(state.kind));
  json.member("device", state.device);
  json.optional_member("used_bytes", state.used_bytes);
  json.optional_member("peak_used_bytes", state.peak_used_bytes);
  json.optional_member("reserved_bytes", state.reserved_bytes);
  json.optional_member("peak_reserved_bytes", state.peak_reserved_bytes);
  json.optional_member("cached_bytes", state.cached_bytes);
  write_objects(json, "cached_bytes_by_stream", state.cached_bytes_by_stream, [&json](const stream_bytes& cached) {
    json.member("stream", address(cached.stream));
    json.member("bytes", static_cast<std::uint64_t>(cached.bytes));
  });
  json.optional_member("largest_free_block", state.largest_free_block);
  json.optional_member("cap_bytes", state.cap_bytes);
  json.optional_member("numa_node", state.numa_node);
  if (!state.note.empty()) json.member("note", std::string_view(state.note));
  json.key("statistics");
  if (state.statistics) {
    json.begin_object();
    for (const auto& [name, counter] : {std::pair{"bytes", state.statistics->bytes},
                                        std::pair{"allocations", state.statistics->allocations}}) {
      json.key(name);
      json.begin_object();
      json.member("current", counter.current);
      json.member("peak", counter.peak);
      json.member("total", counter.total);
      json.end_object();
    }
    json.end_object();
  } else {
    json.null();
  }
}

void write_stack(json_writer& json, const memory_snapshot& stack) {
  json.begin_object();
  json.member("time_ns", stack.time_ns);
  json.member("peak_live_bytes", static_cast<std::uint64_t>(peak_live_bytes(stack)));
  write_objects(json, "resources", stack.resources,
                [&json](const resource_state& state) { write_resource_members(json, state); });
  json.member("live_blocks_complete", stack.live_blocks_complete);
  write_objects(json, "live_blocks", stack.live_blocks,
                [&json](const allocation_record& block) { write_record_members(json, block); });
  json.member("events_dropped", stack.events_dropped);
  write_objects(json, "events", stack.events, [&json](const history_event& event) {
    json.member("action", to_string(event.action));
    write_record_members(json, event);
    if (event.device_free_bytes) json.member("device_free_bytes", static_cast<std::uint64_t>(*event.device_free_bytes));
  });
  write_objects(json, "annotations", stack.annotations, [&json](const history_annotation& mark) {
    json.member("name", std::string_view(mark.name));
    json.member("stage", to_string(mark.stage));
    json.member("time_ns", mark.time_ns);
    json.member("thread", mark.thread);
  });
  json.end_object();
}

// ---- pickle -----------------------------------------------------------------

/// A streaming writer of pickle protocol 2: dicts, lists, a tuple of two,
/// str, int, float, None and bools, with no memo.
class pickle_writer {
 public:
  pickle_writer() { bytes_ += "\x80\x02"; }
  void begin_dict() { bytes_ += "}("; }  // EMPTY_DICT, MARK
  void end_dict() { bytes_ += 'u'; }     // SETITEMS
  void begin_list() { bytes_ += "]("; }  // EMPTY_LIST, MARK
  void end_list() { bytes_ += 'e'; }     // APPENDS
  void pair_of_ints(std::int64_t first, std::int64_t second) {
    value(first);
    value(second);
    bytes_ += '\x86';  // TUPLE2
  }
  void value(std::string_view text) {
    std::string valid;  // Python decodes the bytes as UTF-8
    while (!text.empty()) valid += take_utf8_sequence(text);
    bytes_ += 'X';  // BINUNICODE
    little_endian(static_cast<std::uint32_t>(valid.size()), 4);
    bytes_ += valid;
  }
  void value(const char* text) { value(std::string_view(text)); }
  void value(std::int64_t number) {
    if (number >= std::numeric_limits<std::int32_t>::min() && number <= std::numeric_limits<std::int32_t>::max()) {
      bytes_ += 'J';  // BININT
      little_endian(static_cast<std::uint32_t>(static_cast<std::int32_t>(number)), 4);
    } else {
      bytes_ += "\x8a\x08";  // LONG1, eight bytes of two's complement
      little_endian(static_cast<std::uint64_t>(number), 8);
    }
  }
  void value(std::uint64_t number) {
    if (number <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      value(static_cast<std::int64_t>(number));
    } else {
      bytes_ += "\x8a\x09";  // LONG1, nine bytes: a positive number past int64
      little_endian(number, 8);
      bytes_ += '\0';
    }
  }
  void value(int number) { value(static_cast<std::int64_t>(number)); }
  void value(double number) {
    bytes_ += 'G';  // BINFLOAT, big-endian
    std::uint64_t bits = 0;
    std::memcpy(&bits, &number, sizeof bits);
    for (int shift = 56; shift >= 0; shift -= 8) bytes_ += static_cast<char>((bits >> shift) & 0xff);
  }
  void value(bool truth) { bytes_ += truth ? '\x88' : '\x89'; }
  void none() { bytes_ += 'N'; }
  template <class Value>
  void item(std::string_view name, Value v) {
    value(name);
    value(v);
  }
  [[nodiscard]] std::string take() {
    bytes_ += '.';  // STOP
    return std::move(bytes_);
  }

 private:
  void little_endian(std::uint64_t number, int count) {
    for (int i = 0; i < count; ++i) bytes_ += static_cast<char>((number >> (8 * i)) & 0xff);
  }
  std::string bytes_;
};

/// Frames as PyTorch's snapshot lists them, symbolized once per address.
class frame_names {
 public:
  void write(pickle_writer& pickle, const std::vector<void*>& call_stack) {
    pickle.value(std::string_view("frames"));
    pickle.begin_list();
    for (void* frame : call_stack) {
      auto found = names_.find(frame);
      if (found == names_.end()) found = names_.emplace(frame, detail::name_frame(frame)).first;
      pickle.begin_dict();
      pickle.item("filename", std::string_view(found->second.binary));
      pickle.item("line", 0);
      pickle.item("name", std::string_view(found->second.function));
      pickle.end_dict();
    }
    pickle.end_list();
  }

 private:
  std::unordered_map<void*, detail::frame_name> names_;
};

/// The device_traces index of a stack: its device, or after the last device.
int trace_index(const memory_snapshot& stack, int no_device_index) {
  const int device = stack.resources.empty() ? -1 : stack.resources.front().device;
  const memory_kind kind = stack.resources.empty() ? memory_kind::pageable : stack.resources.front().kind;
  return device >= 0 && kind == memory_kind::device ? device : no_device_index;
}

struct timed_event {
  const history_event* event;
  int stack;
};

void write_trace_entry(pickle_writer& pickle, frame_names& frames, const char* action, const history_event& event,
                       const std::vector<void*>& call_stack) {
  pickle.begin_dict();
  pickle.item("action", action);
  // PyTorch's viewer reads an "oom" entry's device_free; 0 where it is unknown.
  if (event.action == history_action::out_of_memory)
    pickle.item("device_free", static_cast<std::uint64_t>(event.device_free_bytes.value_or(0)));
  else pickle.item("addr", address(event.pointer));
  pickle.item("size", static_cast<std::uint64_t>(event.bytes));
  pickle.item("stream", address(event.stream));
  pickle.item("time_us", static_cast<std::int64_t>(event.time_ns / 1000));
  frames.write(pickle, call_stack);
  pickle.end_dict();
}

// ---- Chrome trace -------------------------------------------------------------

void counter(json_writer& json, std::string_view name, int pid, double ts_us, std::string_view series,
             std::uint64_t value) {
  json.begin_object();
  json.member("name", name);
  json.member("ph", "C");
  json.member("pid", pid);
  json.member("ts", ts_us);
  json.key("args");
  json.begin_object();
  json.member(series, value);
  json.end_object();
  json.end_object();
}

std::uint64_t earliest_time(std::span<const memory_snapshot> stacks) {
  std::uint64_t earliest = std::numeric_limits<std::uint64_t>::max();
  for (const memory_snapshot& stack : stacks) {
    if (!stack.events.empty()) earliest = std::min(earliest, stack.events.front().time_ns);
    if (!stack.annotations.empty()) earliest = std::min(earliest, stack.annotations.front().time_ns);
    earliest = std::min(earliest, stack.time_ns);
  }
  return earliest == std::numeric_limits<std::uint64_t>::max() ? 0 : earliest;
}

}  // namespace

std::string to_json(std::span<const memory_snapshot> stacks) {
  json_writer json;
  json.begin_object();
  json.member("format", "cudapmr-memory-snapshot");
  json.member("version", 1);
  json.key("stacks");
  json.begin_array();
  for (const memory_snapshot& stack : stacks) write_stack(json, stack);
  json.end_array();
  json.end_object();
  return json.take();
}

std::string to_json(const memory_snapshot& stack) { return to_json(std::span(&stack, 1)); }

std::string to_pytorch_pickle(std::span<const memory_snapshot> stacks) {
  int last_device = -1;
  for (const memory_snapshot& stack : stacks) last_device = std::max(last_device, trace_index(stack, -1));
  const int no_device_index = last_device + 1;
  bool any_without_device = false;
  for (const memory_snapshot& stack : stacks) any_without_device |= trace_index(stack, -1) < 0;
  const int trace_count = any_without_device ? no_device_index + 1 : std::max(no_device_index, 1);

  pickle_writer pickle;
  frame_names frames;
  pickle.begin_dict();

  pickle.value(std::string_view("segments"));
  pickle.begin_list();
  for (const memory_snapshot& stack : stacks) {
    const int device = trace_index(stack, no_device_index);
    for (const allocation_record& block : stack.live_blocks) {
      const auto bytes = static_cast<std::uint64_t>(block.bytes);
      pickle.begin_dict();
      pickle.item("device", device);
      pickle.item("address", address(block.pointer));
      pickle.item("total_size", bytes);
      pickle.item("allocated_size", bytes);
      pickle.item("active_size", bytes);
      pickle.item("requested_size", bytes);
      pickle.item("stream", address(block.stream));
      pickle.item("segment_type", bytes <= (std::uint64_t{1} << 20) ? "small" : "large");
      pickle.value(std::string_view("segment_pool_id"));
      pickle.pair_of_ints(0, 0);
      pickle.item("is_expandable", false);
      frames.write(pickle, {});
      pickle.value(std::string_view("blocks"));
      pickle.begin_list();
      pickle.begin_dict();
      pickle.item("address", address(block.pointer));
      pickle.item("size", bytes);
      pickle.item("requested_size", bytes);
      pickle.item("state", "active_allocated");
      frames.write(pickle, block.call_stack);
      pickle.end_dict();
      pickle.end_list();
      pickle.end_dict();
    }
  }
  pickle.end_list();

  // Each device's events from every stack of it, in time order.
  std::vector<std::vector<timed_event>> traces(static_cast<std::size_t>(trace_count));
  for (std::size_t s = 0; s < stacks.size(); ++s)
    for (const history_event& event : stacks[s].events)
      if (event.action != history_action::free_completed)  // written with the free, below
        traces[static_cast<std::size_t>(trace_index(stacks[s], no_device_index))].push_back(
            {&event, static_cast<int>(s)});
  pickle.value(std::string_view("device_traces"));
  pickle.begin_list();
  for (std::vector<timed_event>& trace : traces) {
    std::stable_sort(trace.begin(), trace.end(),
                     [](const timed_event& a, const timed_event& b) { return a.event->time_ns < b.event->time_ns; });
    // A free's call stack is its allocation's.
    std::unordered_map<void*, const std::vector<void*>*> allocated_at;
    pickle.begin_list();
    for (const timed_event& timed : trace) {
      const history_event& event = *timed.event;
      switch (event.action) {
        case history_action::allocate:
          allocated_at[event.pointer] = &event.call_stack;
          write_trace_entry(pickle, frames, "segment_alloc", event, event.call_stack);
          write_trace_entry(pickle, frames, "alloc", event, event.call_stack);
          break;
        case history_action::free: {
          const auto found = allocated_at.find(event.pointer);
          const std::vector<void*> none;
          const std::vector<void*>& call_stack = found != allocated_at.end() ? *found->second : none;
          write_trace_entry(pickle, frames, "free_requested", event, call_stack);
          write_trace_entry(pickle, frames, "free_completed", event, call_stack);
          write_trace_entry(pickle, frames, "segment_free", event, call_stack);
          if (found != allocated_at.end()) allocated_at.erase(found);
          break;
        }
        case history_action::out_of_memory:
          write_trace_entry(pickle, frames, "oom", event, event.call_stack);
          break;
        case history_action::free_completed: break;
      }
    }
    pickle.end_list();
  }
  pickle.end_list();

  pickle.value(std::string_view("external_annotations"));
  pickle.begin_list();
  for (const memory_snapshot& stack : stacks) {
    for (const history_annotation& mark : stack.annotations) {
      pickle.begin_dict();
      pickle.item("device", trace_index(stack, no_device_index));
      pickle.item("name", std::string_view(mark.name));
      pickle.item("stage", mark.stage == annotation_stage::begin ? "START" : "END");
      pickle.item("time_us", static_cast<std::int64_t>(mark.time_ns / 1000));
      pickle.end_dict();
    }
  }
  pickle.end_list();
  pickle.end_dict();
  return pickle.take();
}

std::string to_pytorch_pickle(const memory_snapshot& stack) { return to_pytorch_pickle(std::span(&stack, 1)); }

std::string to_chrome_trace(std::span<const memory_snapshot> stacks) {
  const std::uint64_t start = earliest_time(stacks);
  auto microseconds = [start](std::uint64_t ns) { return static_cast<double>(ns - std::min(ns, start)) / 1000.0; };
  json_writer json;
  json.begin_object();
  json.member("displayTimeUnit", "ns");
  json.key("traceEvents");
  json.begin_array();
  for (std::size_t s = 0; s < stacks.size(); ++s) {
    const memory_snapshot& stack = stacks[s];
    const int pid = static_cast<int>(s) + 1;
    json.begin_object();
    json.member("name", "process_name");
    json.member("ph", "M");
    json.member("pid", pid);
    json.key("args");
    json.begin_object();
    const std::string top = stack.resources.empty() ? std::string("empty stack") : stack.resources.front().name;
    json.member("name", std::string_view(fmt::format("{} (stack {})", top, pid)));
    json.end_object();
    json.end_object();

    std::unordered_map<void*, std::pair<std::size_t, cudaStream_t>> live;
    std::map<cudaStream_t, std::uint64_t> by_stream;
    std::uint64_t total = 0;
    for (const history_event& event : stack.events) {
      const double ts = microseconds(event.time_ns);
      if (event.action == history_action::allocate) {
        live[event.pointer] = {event.bytes, event.stream.get()};
        total += event.bytes;
        by_stream[event.stream.get()] += event.bytes;
      } else if (event.action == history_action::free) {
        const auto found = live.find(event.pointer);
        if (found == live.end()) continue;
        total -= found->second.first;
        by_stream[found->second.second] -= found->second.first;
        const cudaStream_t stream = found->second.second;
        live.erase(found);
        counter(json, "live bytes", pid, ts, "bytes", total);
        counter(json, fmt::format("live bytes on stream {}", fmt::ptr(stream)), pid, ts, "bytes", by_stream[stream]);
        continue;
      } else if (event.action == history_action::out_of_memory) {
        json.begin_object();
        json.member("name", "out of memory");
        json.member("ph", "i");
        json.member("s", "p");
        json.member("pid", pid);
        json.member("tid", static_cast<std::int64_t>(event.thread));
        json.member("ts", ts);
        json.key("args");
        json.begin_object();
        json.member("requested_bytes", static_cast<std::uint64_t>(event.bytes));
        if (event.device_free_bytes)
          json.member("device_free_bytes", static_cast<std::uint64_t>(*event.device_free_bytes));
        json.end_object();
        json.end_object();
        continue;
      } else {
        continue;
      }
      counter(json, "live bytes", pid, ts, "bytes", total);
      counter(json, fmt::format("live bytes on stream {}", fmt::ptr(event.stream.get())), pid, ts, "bytes",
              by_stream[event.stream.get()]);
    }
    for (const history_annotation& mark : stack.annotations) {
      json.begin_object();
      json.member("name", std::string_view(mark.name));
      json.member("ph", mark.stage == annotation_stage::begin ? "B" : "E");
      json.member("pid", pid);
      json.member("tid", static_cast<std::int64_t>(mark.thread));
      json.member("ts", microseconds(mark.time_ns));
      json.end_object();
    }
  }
  json.end_array();
  json.end_object();
  return json.take();
}

std::string to_chrome_trace(const memory_snapshot& stack) { return to_chrome_trace(std::span(&stack, 1)); }

void write_file(const std::filesystem::path& path, std::string_view contents) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) {
    throw std::invalid_argument(
        fmt::format("{}: cannot be opened for writing: {}", path.string(), std::strerror(errno)));
  }
  file.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  file.flush();
  if (!file) throw std::invalid_argument(fmt::format("{}: could not be written: {}", path.string(), std::strerror(errno)));
}

}  // namespace cudapmr
