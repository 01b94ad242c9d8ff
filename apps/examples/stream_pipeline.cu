// SPDX-License-Identifier: Apache-2.0
// A stream-ordered pipeline of buffers: chunks of pinned input are copied to
// device buffers, transformed and copied back, alternating two streams. Each
// device buffer is allocated and freed in order on its stream, so the pool
// reuses memory with no synchronization inside the loop.
#include <cudapmr/buffer.hpp>
#include <cudapmr/device_memory_resource.hpp>
#include <cudapmr/error.hpp>
#include <cudapmr/launch.hpp>
#include <cudapmr/pinned_memory_resource.hpp>
#include <cudapmr/stream.hpp>

#include <array>
#include <cstdio>
#include <span>

namespace {

constexpr std::size_t chunk_elements = std::size_t{1} << 20;
constexpr std::size_t chunks = 16;

__global__ void triple_plus_one(float* values, std::size_t count) {
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count;
       i += std::size_t{gridDim.x} * blockDim.x)
    values[i] = values[i] * 3.0f + 1.0f;
}

}  // namespace

int main() try {
  cudapmr::pinned_memory_resource pinned;
  cudapmr::device_memory_resource& device_memory = cudapmr::default_device_resource(0);
  const std::array<cudapmr::stream, 2> streams{cudapmr::stream(0), cudapmr::stream(0)};

  cudapmr::buffer<float> input(pinned, chunk_elements * chunks, streams[0]);
  cudapmr::buffer<float> output(pinned, chunk_elements * chunks, streams[0]);
  streams[0].synchronize();  // the staging buffers are used by the host and by both streams
  const std::span<float> host_input = input.span();
  for (std::size_t i = 0; i < host_input.size(); ++i) host_input[i] = static_cast<float>(i % 1000);

  for (std::size_t chunk = 0; chunk < chunks; ++chunk) {
    const cudapmr::stream& stream = streams[chunk % streams.size()];
    const std::size_t first = chunk * chunk_elements;
    cudapmr::buffer<float> work(device_memory, chunk_elements, stream);  // allocated in order on `stream`
    work.copy_from(std::span<const float>(host_input.subspan(first, chunk_elements)), stream);
    cudapmr::launch(triple_plus_one, {512, 256}, stream, work.data(), work.size());
    work.copy_to(output.span().subspan(first, chunk_elements), stream);
  }  // each `work` is freed here, in order on its stream, after its copy back
  for (const cudapmr::stream& stream : streams) stream.synchronize();

  std::size_t wrong = 0;
  const std::span<const float> results = output.span();
  for (std::size_t i = 0; i < results.size(); ++i) wrong += results[i] != host_input[i] * 3.0f + 1.0f;
  if (wrong != 0) {
    std::printf("stream_pipeline: %zu of %zu elements are wrong\n", wrong, results.size());
    return 1;
  }
  std::printf("stream_pipeline: %zu chunks of %zu elements through device buffers on %zu streams\n", chunks,
              chunk_elements, streams.size());
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "stream_pipeline: %s\n", error.what());
  return 2;
}
