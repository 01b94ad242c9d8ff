// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/memory_snapshot.hpp"

#include "cudapmr/adaptors/tracking_adaptor.hpp"
#include "cudapmr/detail/call_stack.hpp"
#include "cudapmr/device.hpp"
#include "cudapmr/error.hpp"
#include "cudapmr/interop/format.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <unordered_map>

namespace cudapmr {
namespace {

/// The live blocks the history's events leave, oldest first.
std::vector<allocation_record> replay_live_blocks(const std::vector<history_event>& events) {
  std::unordered_map<void*, allocation_record> live;
  for (const history_event& event : events) {
    if (event.action == history_action::allocate) {
      live.insert_or_assign(event.pointer, allocation_record{event.pointer, event.bytes, event.alignment, event.stream,
                                                      event.thread, event.sequence, event.time_ns, event.call_stack});
    } else if (event.action == history_action::free) {
      live.erase(event.pointer);
    }
  }
  std::vector<allocation_record> blocks;
  blocks.reserve(live.size());
  for (auto& [pointer, block] : live) blocks.push_back(std::move(block));
  std::sort(blocks.begin(), blocks.end(), [](const allocation_record& a, const allocation_record& b) { return a.sequence < b.sequence; });
  return blocks;
}

std::vector<call_site_usage> top_call_sites(const std::vector<allocation_record>& blocks) {
  std::map<void*, call_site_usage> by_frame;  // the innermost frame outside cudapmr
  for (const allocation_record& block : blocks) {
    void* const frame = block.call_stack.empty() ? nullptr : block.call_stack.front();
    call_site_usage& usage = by_frame[frame];
    usage.bytes += block.bytes;
    ++usage.blocks;
  }
  std::vector<std::pair<void*, call_site_usage>> sites(by_frame.begin(), by_frame.end());
  std::sort(sites.begin(), sites.end(), [](const auto& a, const auto& b) { return a.second.bytes > b.second.bytes; });
  if (sites.size() > 5) sites.resize(5);
  std::vector<call_site_usage> top;
  for (auto& [frame, usage] : sites) {
    usage.call_site = frame == nullptr ? "unknown (no call stack captured)" : detail::symbolize_frame(frame);
    top.push_back(std::move(usage));
  }
  return top;
}

std::vector<stream_usage> top_streams(const std::vector<allocation_record>& blocks) {
  std::map<cudaStream_t, stream_usage> by_stream;
  for (const allocation_record& block : blocks) {
    stream_usage& usage = by_stream[block.stream.get()];
    usage.stream = block.stream;
    usage.bytes += block.bytes;
    ++usage.blocks;
  }
  std::vector<stream_usage> top;
  for (const auto& [stream, usage] : by_stream) top.push_back(usage);
  std::sort(top.begin(), top.end(), [](const stream_usage& a, const stream_usage& b) { return a.bytes > b.bytes; });
  if (top.size() > 5) top.resize(5);
  return top;
}

std::string report_text(const out_of_memory_report& report) {
  std::string text = fmt::format("out-of-memory report: {} ({} bytes, alignment {}) asked on stream {} of {}\n",
                                 human_bytes(report.requested_bytes), report.requested_bytes, report.alignment,
                                 fmt::ptr(report.stream.get()), report.resource);
  auto out = std::back_inserter(text);
  fmt::format_to(out, "  live: {} in {} block{}{}\n", human_bytes(report.live_bytes), report.live_blocks,
                 report.live_blocks == 1 ? "" : "s",
                 report.live_complete ? "" : " (as far as the history reaches)");
  if (!report.top_call_sites.empty()) text += "  live by call site:\n";
  for (const call_site_usage& site : report.top_call_sites)
    fmt::format_to(out, "    {} in {} block{} from {}\n", human_bytes(site.bytes), site.blocks,
                   site.blocks == 1 ? "" : "s", site.call_site);
  if (!report.top_streams.empty()) text += "  live by stream:\n";
  for (const stream_usage& stream : report.top_streams)
    fmt::format_to(out, "    {} in {} block{} on stream {}\n", human_bytes(stream.bytes), stream.blocks,
                   stream.blocks == 1 ? "" : "s", fmt::ptr(stream.stream.get()));
  text += "  resources, top first:\n";
  for (const resource_state& state : report.state.resources) {
    const std::string holdings = describe_holdings(state);
    fmt::format_to(out, "    {}{}{}\n", state.name, holdings.empty() ? "" : ": ", holdings);
  }
  if (report.device_free_bytes)
    fmt::format_to(out, "  device free memory: {} ({} bytes)\n", human_bytes(*report.device_free_bytes),
                   *report.device_free_bytes);
  if (report.refused_by_cap) {
    fmt::format_to(out, "  a cap or capacity in the stack leaves no room even with the caches above it emptied "
                   "(caches and pools hold {} free)\n",
                   human_bytes(report.reclaimable_bytes));
  } else {
    fmt::format_to(out, "  caches and pools hold {} free: releasing and trimming them {} have made room\n",
                   human_bytes(report.reclaimable_bytes), report.trimming_would_make_room ? "would" : "would not");
  }
  return text;
}

}  // namespace

std::string describe_holdings(const resource_state& state) {
  std::string line;
  auto add = [&line](std::string part) {
    line += line.empty() ? "" : ", ";
    line += part;
  };
  if (state.used_bytes) add(fmt::format("used {}", human_bytes(*state.used_bytes)));
  if (state.peak_used_bytes) add(fmt::format("peak {}", human_bytes(*state.peak_used_bytes)));
  if (state.reserved_bytes) add(fmt::format("reserved {}", human_bytes(*state.reserved_bytes)));
  if (state.cached_bytes) add(fmt::format("cached {}", human_bytes(*state.cached_bytes)));
  for (const stream_bytes& cached : state.cached_bytes_by_stream)
    add(fmt::format("{} cached for stream {}", human_bytes(cached.bytes), fmt::ptr(cached.stream.get())));
  if (state.cap_bytes) add(fmt::format("cap {}", human_bytes(*state.cap_bytes)));
  if (state.largest_free_block) add(fmt::format("largest free block {}", human_bytes(*state.largest_free_block)));
  if (state.numa_node) add(fmt::format("on NUMA node {}", *state.numa_node));
  if (!state.note.empty()) add(fmt::format("note: {}", state.note));
  return line;
}

memory_snapshot snapshot(const stream_ordered_resource& top) {
  memory_snapshot taken;
  taken.time_ns = history_clock_ns();
  const tracking_adaptor* tracker = nullptr;
  const history_adaptor* history = nullptr;
  for (const stream_ordered_resource* resource = &top; resource != nullptr;) {
    taken.resources.push_back(resource->state());
    // The live blocks and events come from the adaptors that keep them.
    if (tracker == nullptr) tracker = dynamic_cast<const tracking_adaptor*>(resource);
    if (history == nullptr) history = dynamic_cast<const history_adaptor*>(resource);
    resource = resource->upstream();
  }
  if (history != nullptr) {
    taken.events = history->events();
    // The ring may drop events while it is read: count what is missing before the first kept one.
    const std::uint64_t first = taken.events.empty() ? history->recorded() + 1 : taken.events.front().sequence;
    taken.events_dropped = first - 1;
    taken.annotations = history->annotations();
  }
  if (tracker != nullptr) {
    taken.live_blocks = tracker->outstanding();
    taken.live_blocks_complete = true;
  } else if (history != nullptr) {
    taken.live_blocks = replay_live_blocks(taken.events);
    taken.live_blocks_complete = taken.events_dropped == 0;
  }
  return taken;
}

std::size_t peak_live_bytes(const memory_snapshot& taken) {
  std::unordered_map<void*, std::size_t> live;
  std::size_t current = 0;
  std::size_t peak = 0;
  for (const history_event& event : taken.events) {
    if (event.action == history_action::allocate) {
      live[event.pointer] = event.bytes;
      current += event.bytes;
      peak = std::max(peak, current);
    } else if (event.action == history_action::free) {
      if (const auto found = live.find(event.pointer); found != live.end()) {
        current -= found->second;
        live.erase(found);
      }
    }
  }
  return peak;
}

out_of_memory_report explain_out_of_memory(const stream_ordered_resource& top, std::size_t bytes,
                                           std::size_t alignment, stream_ref stream) {
  out_of_memory_report report;
  report.requested_bytes = bytes;
  report.alignment = alignment;
  report.stream = stream;
  report.resource = top.description();
  report.state = snapshot(top);
  for (const allocation_record& block : report.state.live_blocks) report.live_bytes += block.bytes;
  report.live_blocks = report.state.live_blocks.size();
  report.live_complete = report.state.live_blocks_complete;
  report.top_call_sites = top_call_sites(report.state.live_blocks);
  report.top_streams = top_streams(report.state.live_blocks);

  // A cap (a limiting adaptor, a host resource's capacity) counts what the
  // caches above it hold: emptying them makes room under it, and nothing else does.
  std::size_t headroom = 0;  // what the leaf or the last cap could still give without trimming
  for (const resource_state& state : report.state.resources) {
    if (state.cap_bytes && state.largest_free_block) {
      if (*state.largest_free_block + report.reclaimable_bytes < bytes) report.refused_by_cap = true;
      headroom = *state.largest_free_block;
    }
    if (state.cached_bytes) report.reclaimable_bytes += *state.cached_bytes;
    // Reserved and unused, no more than the layer says a trim gives back
    // (nothing, for a managed pool that keeps its pages).
    if (state.reserved_bytes && state.used_bytes && *state.reserved_bytes > *state.used_bytes)
      report.reclaimable_bytes += std::min(*state.reserved_bytes - *state.used_bytes,
                                           state.releasable_bytes.value_or(std::numeric_limits<std::size_t>::max()));
  }
  report.trimming_would_make_room = !report.refused_by_cap && report.reclaimable_bytes + headroom >= bytes;
  if ((top.kind() == memory_kind::device || top.kind() == memory_kind::managed) && top.device_id() >= 0)
    report.device_free_bytes = device::free_memory_if_known(top.device_id());
  report.text = report_text(report);
  return report;
}

}  // namespace cudapmr
