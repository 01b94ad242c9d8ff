// SPDX-License-Identifier: Apache-2.0
// Thrust over cudapmr: a thrust::device_vector whose storage, and the
// temporary storage of sort and reduce, come from a cudapmr resource, all in
// order on one stream.
#include <cudapmr/device_memory_resource.hpp>
#include <cudapmr/stream.hpp>
#include <cudapmr/interop/thrust_allocator.hpp>

#include <thrust/device_vector.h>
#include <thrust/equal.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/reduce.h>
#include <thrust/sort.h>
#include <thrust/tabulate.h>

#include <cstdint>
#include <cstdio>

namespace {

constexpr std::uint32_t count = 10'000'000;

/// Shuffles 0 .. count-1: i * 7919 mod count visits every value once (7919 is coprime with count).
struct shuffled {
  __host__ __device__ std::uint32_t operator()(std::uint32_t i) const {
    return static_cast<std::uint32_t>(std::uint64_t{i} * 7919u % count);
  }
};

}  // namespace

int main() try {
  cudapmr::device_memory_resource& device_memory = cudapmr::default_device_resource(0);
  const cudapmr::stream stream(0);

  using vector = thrust::device_vector<std::uint32_t, cudapmr::thrust_allocator<std::uint32_t>>;
  vector keys(count, cudapmr::thrust_allocator<std::uint32_t>(device_memory, stream));
  const auto on_stream = cudapmr::thrust_policy(device_memory, stream);  // temporary storage from device_memory
  thrust::tabulate(on_stream, keys.begin(), keys.end(), shuffled{});
  thrust::sort(on_stream, keys.begin(), keys.end());

  const bool sorted = thrust::equal(on_stream, keys.begin(), keys.end(), thrust::counting_iterator<std::uint32_t>(0));
  const std::uint64_t sum = thrust::reduce(on_stream, keys.begin(), keys.end(), std::uint64_t{0});
  const std::uint64_t expected_sum = std::uint64_t{count} * (count - 1) / 2;
  if (!sorted || sum != expected_sum) {
    std::printf("thrust_sort: sorted %s, sum %llu (expected %llu)\n", sorted ? "yes" : "no",
                static_cast<unsigned long long>(sum), static_cast<unsigned long long>(expected_sum));
    return 1;
  }
  std::printf("thrust_sort: sorted and summed %u keys with storage from %s\n", count,
              device_memory.description().c_str());
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "thrust_sort: %s\n", error.what());
  return 2;
}
