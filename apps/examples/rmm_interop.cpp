// SPDX-License-Identifier: Apache-2.0
// RAPIDS on cudapmr: RMM 26.x draws from a cudapmr stack wherever it takes a
// `device_async_resource_ref` or an `any_resource` — an RMM pool over the
// stack, the stack as RMM's current device resource behind `device_uvector`
// and `device_buffer`, and RMM's statistics adaptor over it across two
// streams. A statistics_adaptor of cudapmr's under RMM counts what RMM asked for.
//
// RMM brings a newer CCCL than the toolkit's: this file alone includes RMM and
// is compiled against RMM's CCCL (apps/examples/CMakeLists.txt).
// Exit status: 0 every check passed, 1 a check failed, 2 it could not run (no GPU).
#include <cudapmr/interop/cccl.hpp>  // first: it enables cuda::mr before anything includes it

#include <cudapmr/adaptors/statistics_adaptor.hpp>
#include <cudapmr/device.hpp>
#include <cudapmr/device_stack.hpp>
#include <cudapmr/error.hpp>
#include <cudapmr/stream.hpp>

#include <rmm/device_buffer.hpp>
#include <rmm/device_uvector.hpp>
#include <rmm/mr/per_device_resource.hpp>
#include <rmm/mr/pool_memory_resource.hpp>
#include <rmm/mr/statistics_resource_adaptor.hpp>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace {

constexpr std::size_t mebibyte = std::size_t{1} << 20;

int failures = 0;

void check(bool passed, const std::string& what) {
  std::printf("%s: %s\n", passed ? "ok" : "FAILED", what.c_str());
  if (!passed) ++failures;
}

/// Writes a ramp into `bytes` of device memory through the host and reads it
/// back: the memory RMM handed out is real and whole.
bool round_trips(void* device_memory, std::size_t bytes, cudaStream_t stream) {
  std::vector<std::uint32_t> written(bytes / sizeof(std::uint32_t));
  for (std::size_t i = 0; i < written.size(); ++i) written[i] = static_cast<std::uint32_t>(i * 2654435761u);
  std::vector<std::uint32_t> read(written.size());
  CUDAPMR_CHECK(cudaMemcpyAsync(device_memory, written.data(), bytes, cudaMemcpyHostToDevice, stream));
  CUDAPMR_CHECK(cudaMemcpyAsync(read.data(), device_memory, bytes, cudaMemcpyDeviceToHost, stream));
  CUDAPMR_CHECK(cudaStreamSynchronize(stream));
  return read == written;
}

std::int64_t live_bytes(const cudapmr::statistics_adaptor& counted) { return counted.statistics().bytes.current; }

}  // namespace

int main() try {
  if (cudapmr::device::count() == 0) {
    std::fprintf(stderr, "rmm_interop: no CUDA device was found\n");
    return 2;
  }
  cudapmr::device_stack stack(0);
  cudapmr::statistics_adaptor counted(stack);
  // What RMM takes: a copyable reference to a device-accessible resource.
  const cudapmr::cccl_device_resource cudapmr_memory(counted);
  const cudapmr::stream first(0);
  const cudapmr::stream second(0);

  {  // An RMM pool whose blocks come from the stack.
    rmm::mr::pool_memory_resource pool(cudapmr_memory, 64 * mebibyte);
    check(live_bytes(counted) >= static_cast<std::int64_t>(64 * mebibyte),
          "RMM's pool took its initial 64 MiB from the cudapmr stack");
    rmm::device_buffer buffer(mebibyte, first.get(), pool);
    check(round_trips(buffer.data(), buffer.size(), first.get()), "a device_buffer from the pool holds its data");
  }
  check(live_bytes(counted) == 0, "the pool gave everything back to the stack when it went away");

  {  // The stack as RMM's current device resource: RMM's containers draw from it unasked.
    auto previous = rmm::mr::set_current_device_resource(cudapmr_memory);
    const std::int64_t allocations_before = counted.statistics().allocations.total;
    {
      rmm::device_uvector<std::uint32_t> values(1 << 18, first.get());
      check(counted.statistics().allocations.total == allocations_before + 1 &&
                live_bytes(counted) >= static_cast<std::int64_t>(values.size() * sizeof(std::uint32_t)),
            "device_uvector drew from cudapmr as RMM's current device resource");
      check(round_trips(values.data(), values.size() * sizeof(std::uint32_t), first.get()),
            "the device_uvector holds its data");
      rmm::device_buffer buffer(3 * mebibyte, first.get());
      check(live_bytes(counted) >= static_cast<std::int64_t>(4 * mebibyte), "so did a device_buffer");
    }
    first.synchronize();
    rmm::mr::set_current_device_resource(std::move(previous));
  }
  check(live_bytes(counted) == 0, "RMM's containers freed what they took");

  {  // RMM's statistics adaptor over cudapmr, allocating on one stream and freeing on another.
    rmm::mr::statistics_resource_adaptor statistics(cudapmr_memory);
    void* block = statistics.allocate(::cuda::stream_ref(first.get()), 2 * mebibyte, 256);
    check(round_trips(block, 2 * mebibyte, first.get()), "a block through RMM's statistics adaptor holds its data");
    // The free on the second stream is ordered after the first's use of the block.
    cudaEvent_t used = nullptr;
    CUDAPMR_CHECK(cudaEventCreateWithFlags(&used, cudaEventDisableTiming));
    CUDAPMR_CHECK(cudaEventRecord(used, first.get()));
    CUDAPMR_CHECK(cudaStreamWaitEvent(second.get(), used));
    CUDAPMR_CHECK(cudaEventDestroy(used));
    check(statistics.get_bytes_counter().value == static_cast<std::int64_t>(2 * mebibyte) &&
              live_bytes(counted) == static_cast<std::int64_t>(2 * mebibyte),
          "RMM's statistics and cudapmr's agree on the 2 MiB held");
    statistics.deallocate(::cuda::stream_ref(second.get()), block, 2 * mebibyte, 256);
    second.synchronize();
    check(statistics.get_bytes_counter().value == 0 &&
              statistics.get_bytes_counter().peak == static_cast<std::int64_t>(2 * mebibyte) && live_bytes(counted) == 0,
          "freed on the second stream: both count 0 bytes held, RMM's peak 2 MiB");
  }

  std::printf("rmm_interop: %s (cudapmr served %lld allocations for RMM, peak %lld bytes)\n",
              failures == 0 ? "every check passed" : "a check failed",
              static_cast<long long>(counted.statistics().allocations.total),
              static_cast<long long>(counted.statistics().bytes.peak));
  return failures == 0 ? 0 : 1;
} catch (const cudapmr::cuda_error& error) {
  std::fprintf(stderr, "rmm_interop: %s\n", error.what());
  return cudapmr::is_no_device_error(error.error()) ? 2 : 1;
} catch (const std::exception& error) {
  std::fprintf(stderr, "rmm_interop: %s\n", error.what());
  return 1;
}
