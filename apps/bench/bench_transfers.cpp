// SPDX-License-Identifier: Apache-2.0
// Transfer benchmarks: copy bandwidth per direction and memory kind, from
// 4 KiB to 1 GiB; the scale_and_bias kernel against a device-to-device copy;
// managed memory filled on the host, then read by a kernel with and without
// a prefetch first.
//
// Names: copy/<direction>/<memory kind>/<size>/<entrant>,
// kernel/<size>/<entrant>, managed/<size>/<entrant>. On each host NUMA node,
// copy/<direction>/<pinned|pageable>/<size>/numa:node<N> copy from a pinned
// pool on node N, or stage a pageable buffer (kept on the device's node)
// through blocks and threads on node N; the label says node-local or
// node-remote, against the node nearest device 0. "peer:" entrants are the
// raw CUDA call (or, for the kernel, the device-to-device copy it is held to),
// "cudapmr:" ours, "variant:" alternatives shown for tuning only (the table
// leaves them out). Device work is timed with CUDA events; rates count bytes
// moved one way for host<->device copies, bytes read plus bytes written for
// device copies and kernels, and the buffer once for the managed cases.
#include <scale_and_bias.hpp>

#include <cudapmr/cudapmr.hpp>
#include <cudapmr/detail/host_thread_pool.hpp>
#include <cudapmr/detail/staged_copy.hpp>
#include <cudapmr/host_topology.hpp>

#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace bench {
namespace {

constexpr std::size_t kibibyte = 1024;
constexpr std::size_t mebibyte = 1024 * kibibyte;
constexpr std::size_t gibibyte = 1024 * mebibyte;

using byte_buffer = cudapmr::buffer<unsigned char>;

/// 4 KiB, 16 KiB, ... 1 GiB.
std::vector<std::size_t> sizes() {
  std::vector<std::size_t> all;
  for (std::size_t bytes = 4 * kibibyte; bytes <= gibibyte; bytes *= 4) all.push_back(bytes);
  return all;
}

std::string size_name(std::size_t bytes) {
  if (bytes >= gibibyte) return std::to_string(bytes / gibibyte) + "GiB";
  if (bytes >= mebibyte) return std::to_string(bytes / mebibyte) + "MiB";
  return std::to_string(bytes / kibibyte) + "KiB";
}

/// Calls per timed iteration: small transfers are timed back to back, in
/// batches of about 64 MiB.
std::size_t batch_for(std::size_t bytes) { return std::clamp<std::size_t>(64 * mebibyte / bytes, 1, 256); }

/// How many buffers of `bytes` to rotate through so that together they exceed
/// four times the L2 cache: repeated work on one buffer would time the cache.
std::size_t rotation_for(std::size_t bytes) {
  static const std::size_t footprint = [] {
    return 4 * static_cast<std::size_t>(cudapmr::device(0).attribute(cudaDevAttrL2CacheSize));
  }();
  return std::clamp<std::size_t>((footprint + bytes - 1) / bytes, 1, 256);
}

/// Pseudo-random bytes: no timing on zeros.
void fill_random(std::span<unsigned char> bytes) {
  std::uint64_t state = 0x2545f4914f6cdd1dull;
  for (std::size_t i = 0; i < bytes.size(); i += sizeof(state)) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    std::memcpy(bytes.data() + i, &state, std::min(sizeof(state), bytes.size() - i));
  }
}

/// A start and a stop event: the device time between two points of a stream.
class event_timer final {
 public:
  event_timer() {
    CUDAPMR_CHECK(cudaEventCreate(&start_));
    CUDAPMR_CHECK(cudaEventCreate(&stop_));
  }
  ~event_timer() {
    static_cast<void>(cudaEventDestroy(start_));
    static_cast<void>(cudaEventDestroy(stop_));
  }
  event_timer(const event_timer&) = delete;
  event_timer& operator=(const event_timer&) = delete;

  void start(cudaStream_t stream) { CUDAPMR_CHECK(cudaEventRecord(start_, stream)); }
  /// Seconds since `start`, once the stream has reached this point.
  double stop(cudaStream_t stream) {
    CUDAPMR_CHECK(cudaEventRecord(stop_, stream));
    CUDAPMR_CHECK(cudaEventSynchronize(stop_));
    float milliseconds = 0;
    CUDAPMR_CHECK(cudaEventElapsedTime(&milliseconds, start_, stop_));
    return static_cast<double>(milliseconds) / 1e3;
  }

 private:
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

/// Reports `bytes_per_iteration` moved in each iteration run.
void count_bytes(benchmark::State& state, std::size_t bytes_per_iteration) {
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(bytes_per_iteration));
}

/// Runs `call(0)` once to warm up (module loading, staging blocks, first
/// touch), then `call(1)`, `call(2)`, ... in batches, one event-timed batch
/// per benchmark iteration; each call moves `bytes_per_call`.
void run_timed(benchmark::State& state, const cudapmr::stream& stream, std::size_t bytes_per_call,
               std::size_t batch, const std::function<void(std::size_t)>& call) {
  event_timer timer;
  std::size_t next = 0;
  call(next++);
  stream.synchronize();
  for (auto _ : state) {
    timer.start(stream.get());
    for (std::size_t i = 0; i < batch; ++i) call(next++);
    state.SetIterationTime(timer.stop(stream.get()));
  }
  count_bytes(state, batch * bytes_per_call);
}

/// Runs `body`, turning an allocation or CUDA failure into a skipped benchmark.
void guarded(benchmark::State& state, const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& error) {
    state.SkipWithError(error.what());
  }
}

/// `count` device buffers of `bytes` each, filled with random bytes.
std::vector<byte_buffer> device_buffers(std::size_t count, std::size_t bytes, const cudapmr::stream& stream) {
  std::vector<unsigned char> pattern(bytes);
  fill_random(pattern);
  std::vector<byte_buffer> buffers;
  buffers.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    buffers.emplace_back(cudapmr::default_device_resource(0), bytes, stream);
    buffers.back().copy_from(std::span<const unsigned char>(pattern), stream);
  }
  stream.synchronize();
  return buffers;
}

// ---- copies between host and device ----------------------------------------

enum class host_kind { pinned, pageable, managed };
enum class copy_path { raw, buffer, staged };

const char* name_of(host_kind kind) {
  return kind == host_kind::pinned ? "pinned" : kind == host_kind::pageable ? "pageable" : "managed";
}

struct unmapper {
  std::size_t bytes;
  void operator()(unsigned char* pages) const noexcept { ::munmap(pages, bytes); }
};
using mapped_pages = std::unique_ptr<unsigned char, unmapper>;

/// `bytes` of pageable memory, first touched by threads on `numa_node` (the
/// kernel puts a page where it is first written), so that it lives there.
mapped_pages pageable_on(int numa_node, std::size_t bytes) {
  void* pages = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (pages == MAP_FAILED) throw std::bad_alloc();
  mapped_pages mapped(static_cast<unsigned char*>(pages), unmapper{bytes});
  cudapmr::detail::host_thread_pool& threads = cudapmr::detail::host_copy_pool(numa_node);
  const std::size_t parts = std::max<std::size_t>(threads.concurrency(), 1);
  threads.run(parts, [&](std::size_t part) {
    const auto piece = cudapmr::detail::partition(bytes, parts, part, cudapmr::detail::host_copy_granule);
    std::memset(mapped.get() + piece.offset, 0, piece.bytes);
  });
  return mapped;
}

/// One direction between a host-side memory kind and device buffers, by one
/// path; with `numa_node`, the pinned pool or the staging on that node.
void host_device_copy(benchmark::State& state, std::size_t bytes, bool to_device, host_kind kind, copy_path path,
                      std::optional<int> numa_node = std::nullopt) {
  guarded(state, [&] {
    const cudapmr::stream stream(0);
    std::vector<byte_buffer> device = device_buffers(rotation_for(bytes), bytes, stream);
    std::optional<cudapmr::pinned_memory_resource> pinned_pool;
    if (numa_node) pinned_pool.emplace(cudapmr::pinned_pool_options{.numa_node = numa_node});
    else pinned_pool.emplace();  // the default pool, as users' first pinned resource
    cudapmr::pinned_memory_resource& pinned = *pinned_pool;
    cudapmr::managed_memory_resource managed;
    std::vector<unsigned char> pageable;
    mapped_pages pageable_near_device(nullptr, unmapper{0});
    std::optional<byte_buffer> host_buffer;
    std::span<unsigned char> host;
    if (numa_node) {
      const int near = cudapmr::detail::staging_numa_node(0);
      state.SetLabel(*numa_node == near ? "node-local" : "node-remote");
      if (kind == host_kind::pinned && !pinned.placement_note().empty()) {
        state.SkipWithError(pinned.placement_note().c_str());
        return;
      }
    }
    if (kind == host_kind::pageable && numa_node) {
      pageable_near_device = pageable_on(cudapmr::detail::staging_numa_node(0), bytes);
      host = std::span<unsigned char>(pageable_near_device.get(), bytes);
    } else if (kind == host_kind::pageable) {
      pageable.resize(bytes);
      host = pageable;
    } else {
      host_buffer.emplace(kind == host_kind::pinned ? static_cast<cudapmr::stream_ordered_resource&>(pinned)
                                                    : static_cast<cudapmr::stream_ordered_resource&>(managed),
                          bytes, stream);
      stream.synchronize();
      host = host_buffer->span();
    }
    fill_random(host);  // host writes: managed pages now live on the host
    run_timed(state, stream, bytes, batch_for(bytes), [&](std::size_t call) {
      byte_buffer& on_device = device[call % device.size()];
      if (path == copy_path::raw) {
        void* destination = to_device ? static_cast<void*>(on_device.data()) : static_cast<void*>(host.data());
        const void* source = to_device ? static_cast<const void*>(host.data()) : on_device.data();
        CUDAPMR_CHECK(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDefault, stream.get()));
      } else if (path == copy_path::staged) {
        if (to_device) cudapmr::detail::staged_copy_to_device(on_device.data(), host.data(), bytes, stream, numa_node);
        else cudapmr::detail::staged_copy_to_host(host.data(), on_device.data(), bytes, stream, numa_node);
      } else if (host_buffer) {
        if (to_device) on_device.copy_from(*host_buffer, stream);
        else on_device.copy_to(*host_buffer, stream);
      } else {
        if (to_device) on_device.copy_from(std::span<const unsigned char>(host), stream);
        else on_device.copy_to(host, stream);
      }
    });
  });
}

// ---- device copies and the kernel --------------------------------------------

/// A device-to-device copy of `bytes` between rotating buffers, raw or through buffer::copy_from.
void device_copy(benchmark::State& state, std::size_t bytes, bool raw) {
  guarded(state, [&] {
    const cudapmr::stream stream(0);
    std::vector<byte_buffer> device = device_buffers(std::max<std::size_t>(2, rotation_for(bytes)), bytes, stream);
    run_timed(state, stream, 2 * bytes, batch_for(bytes), [&](std::size_t call) {
      byte_buffer& source = device[call % device.size()];
      byte_buffer& destination = device[(call + device.size() / 2) % device.size()];
      if (raw) CUDAPMR_CHECK(cudaMemcpyAsync(destination.data(), source.data(), bytes, cudaMemcpyDeviceToDevice,
                                             stream.get()));
      else destination.copy_from(source, stream);
    });
  });
}

using kernel_launch = std::function<void(float*, std::size_t, cudapmr::stream_ref)>;

/// A kernel in place over `bytes` of floats in rotating buffers: read plus write.
void kernel_in_place(benchmark::State& state, std::size_t bytes, const kernel_launch& launch) {
  guarded(state, [&] {
    const cudapmr::stream stream(0);
    std::vector<byte_buffer> device = device_buffers(rotation_for(bytes), bytes, stream);
    const std::size_t count = bytes / sizeof(float);
    run_timed(state, stream, 2 * bytes, batch_for(bytes), [&](std::size_t call) {
      launch(reinterpret_cast<float*>(device[call % device.size()].data()), count, stream);
    });
  });
}

// ---- managed memory ---------------------------------------------------------------

/// Managed memory written by the host, then the kernel over it, with or
/// without a prefetch to the device first; the host's writes (untimed) bring
/// the pages back before each iteration.
void managed_kernel(benchmark::State& state, std::size_t bytes, bool prefetch) {
  guarded(state, [&] {
    if (bytes > cudapmr::device(0).free_memory() / 2) {
      state.SkipWithError("too little free device memory for managed memory of this size");
      return;
    }
    const cudapmr::stream stream(0);
    cudapmr::managed_memory_resource managed;
    byte_buffer unified(managed, bytes, stream);
    stream.synchronize();
    auto* data = reinterpret_cast<float*>(unified.data());
    const std::size_t count = bytes / sizeof(float);
    event_timer timer;
    for (auto _ : state) {
      std::memset(unified.data(), 0x3f, bytes);  // floats near 0.75: pages on the host
      timer.start(stream.get());
      if (prefetch) unified.prefetch_to_device(0, stream);
      demo::scale_and_bias(data, count, 1.0f, 0.5f, stream);
      state.SetIterationTime(timer.stop(stream.get()));
    }
    count_bytes(state, bytes);
  });
}

template <class Body>
void add(const std::string& name, Body body) {
  benchmark::RegisterBenchmark(name.c_str(), body)->UseManualTime()->MinTime(0.2);
}

}  // namespace

void register_transfer_benchmarks() {
  struct host_entrant {
    host_kind kind;
    copy_path path;
    const char* name;
  };
  const host_entrant host_entrants[] = {
      {host_kind::pinned, copy_path::raw, "peer:cudaMemcpyAsync"},
      {host_kind::pinned, copy_path::buffer, "cudapmr:buffer"},
      {host_kind::pageable, copy_path::raw, "peer:cudaMemcpyAsync"},
      {host_kind::pageable, copy_path::buffer, "cudapmr:buffer"},
      {host_kind::pageable, copy_path::staged, "variant:staged"},  // staged at every size: where the threshold goes
      {host_kind::managed, copy_path::raw, "peer:cudaMemcpyAsync"},
      {host_kind::managed, copy_path::buffer, "cudapmr:buffer"},
  };
  for (const bool to_device : {true, false}) {
    for (const host_entrant& entrant : host_entrants) {
      for (const std::size_t bytes : sizes()) {
        add(std::string("copy/") + (to_device ? "h2d/" : "d2h/") + name_of(entrant.kind) + "/" + size_name(bytes) +
                "/" + entrant.name,
            [bytes, to_device, entrant](benchmark::State& state) {
              host_device_copy(state, bytes, to_device, entrant.kind, entrant.path);
            });
      }
    }
  }
  // Near and far from the device: what a copy through the other socket costs.
  for (const bool to_device : {true, false}) {
    for (const int node : cudapmr::host_numa_nodes()) {
      for (const host_kind kind : {host_kind::pinned, host_kind::pageable}) {
        for (const std::size_t bytes : {64 * mebibyte, gibibyte}) {
          add(std::string("copy/") + (to_device ? "h2d/" : "d2h/") + name_of(kind) + "/" + size_name(bytes) +
                  "/numa:node" + std::to_string(node),
              [bytes, to_device, kind, node](benchmark::State& state) {
                host_device_copy(state, bytes, to_device, kind,
                                 kind == host_kind::pinned ? copy_path::raw : copy_path::staged, node);
              });
        }
      }
    }
  }
  for (const bool raw : {true, false}) {
    for (const std::size_t bytes : sizes()) {
      add("copy/d2d/device/" + size_name(bytes) + (raw ? "/peer:cudaMemcpyAsync" : "/cudapmr:buffer"),
          [bytes, raw](benchmark::State& state) { device_copy(state, bytes, raw); });
    }
  }

  struct kernel_entrant {
    const char* name;
    kernel_launch launch;
  };
  auto vectorized = [](unsigned loads) {
    return [loads](float* data, std::size_t count, cudapmr::stream_ref stream) {
      demo::scale_and_bias_vectorized(data, count, -1.0f, 0.0f, loads, stream);
    };
  };
  // Scale -1, bias 0: the values stay bounded however often the kernel runs.
  const std::vector<kernel_entrant> kernels{
      {"cudapmr:scale_and_bias",
       [](float* data, std::size_t count, cudapmr::stream_ref stream) {
         demo::scale_and_bias(data, count, -1.0f, 0.0f, stream);
       }},
      {"variant:scalar",
       [](float* data, std::size_t count, cudapmr::stream_ref stream) {
         demo::scale_and_bias_scalar(data, count, -1.0f, 0.0f, stream);
       }},
      {"variant:float4_x1", vectorized(1)},
      {"variant:float4_x2", vectorized(2)},
      {"variant:float4_x8", vectorized(8)},
  };
  for (const std::size_t bytes : sizes()) {
    add("kernel/" + size_name(bytes) + "/peer:d2d_copy",
        [bytes](benchmark::State& state) { device_copy(state, bytes, true); });
    for (const kernel_entrant& entrant : kernels) {
      add("kernel/" + size_name(bytes) + "/" + entrant.name,
          [bytes, launch = entrant.launch](benchmark::State& state) { kernel_in_place(state, bytes, launch); });
    }
  }

  for (const std::size_t bytes : sizes()) {
    add("managed/" + size_name(bytes) + "/peer:page_faults",
        [bytes](benchmark::State& state) { managed_kernel(state, bytes, false); });
    add("managed/" + size_name(bytes) + "/cudapmr:prefetch",
        [bytes](benchmark::State& state) { managed_kernel(state, bytes, true); });
  }
}

}  // namespace bench
