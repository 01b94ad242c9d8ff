// SPDX-License-Identifier: Apache-2.0
// A capped, tracked resource finding a leak: a limiting_adaptor caps what the
// code under test may hold at once, and a tracking_adaptor under it remembers
// every allocation, so that whatever is still held at the end is reported
// with its size, stream and call stack.
#include <cudapmr/adaptors/limiting_adaptor.hpp>
#include <cudapmr/adaptors/tracking_adaptor.hpp>
#include <cudapmr/buffer.hpp>
#include <cudapmr/device_memory_resource.hpp>
#include <cudapmr/error.hpp>
#include <cudapmr/stream.hpp>

#include <cstdio>
#include <exception>

namespace {

constexpr std::size_t mebibyte = std::size_t{1} << 20;

/// The code under test: it frees its buffers, but forgets one raw allocation.
void* leaky_step(cudapmr::stream_ordered_resource& memory, cudapmr::stream_ref stream) {
  const cudapmr::buffer<float> scratch(memory, 1000, stream);  // freed when it goes out of scope
  return memory.allocate_async(3 * mebibyte, stream);          // never freed: the leak
}

}  // namespace

int main() try {
  cudapmr::device_memory_resource& device_memory = cudapmr::default_device_resource(0);
  cudapmr::tracking_adaptor tracked(device_memory, {.capture_call_stacks = true});
  cudapmr::limiting_adaptor capped(tracked, 64 * mebibyte);
  const cudapmr::stream stream(0);

  void* const leaked = leaky_step(capped, stream);

  // The cap refuses what would pass it, before the request reaches the device.
  bool refused = false;
  try {
    const cudapmr::buffer<char> too_large(capped, 100 * mebibyte, stream);
  } catch (const cudapmr::out_of_memory& error) {
    std::printf("refused as it should be: %s\n", error.what());
    refused = true;
  }
  stream.synchronize();

  std::printf("%s\n", tracked.leak_report().c_str());
  const auto outstanding = tracked.outstanding();
  const bool found = outstanding.size() == 1 && outstanding.front().pointer == leaked &&
                     outstanding.front().bytes == 3 * mebibyte && capped.used_bytes() == 3 * mebibyte;

  capped.deallocate_async(leaked, 3 * mebibyte, stream);  // clean up, and the tracker agrees
  stream.synchronize();
  if (!refused || !found || tracked.outstanding_count() != 0) {
    std::printf("leak_check: refused %d, leak found %d, outstanding after the clean-up %zu\n", refused, found,
                tracked.outstanding_count());
    return 1;
  }
  std::printf("leak_check: the cap refused 100 MiB and the tracker found the one 3 MiB leak\n");
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "leak_check: %s\n", error.what());
  return 2;
}
