// SPDX-License-Identifier: Apache-2.0
// The fill kernel behind buffer<T>::fill for patterns that are not one repeated byte.
#include "cudapmr/detail/buffer_operations.hpp"
#include "cudapmr/error.hpp"
#include "cudapmr/launch.hpp"

#include <cstdint>
#include <cstring>

namespace cudapmr::detail {
namespace {

/// Largest pattern the kernel takes by value; larger element types fall back to bytes-by-bytes copies.
constexpr std::size_t max_pattern_bytes = 64;

struct pattern {
  unsigned char bytes[max_pattern_bytes];
};

template <class Word>
__global__ void fill_words(Word* destination, std::size_t count, Word value) {
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count; i += stride)
    destination[i] = value;
}

__global__ void fill_pattern_bytes(unsigned char* destination, std::size_t count, pattern value,
                                   std::size_t value_bytes) {
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count * value_bytes; i += stride)
    destination[i] = value.bytes[i % value_bytes];
}

unsigned int grid_for(std::size_t items, unsigned int block) {
  constexpr std::size_t max_blocks = 65536;  // grid-stride loops cover the rest
  const std::size_t blocks = (items + block - 1) / block;
  return static_cast<unsigned int>(blocks < max_blocks ? blocks : max_blocks);
}

template <class Word>
void launch_words(void* destination, std::size_t count, const void* value, cudaStream_t stream) {
  Word word;
  std::memcpy(&word, value, sizeof(Word));
  constexpr unsigned int block = 256;
  launch(fill_words<Word>, {grid_for(count, block), block}, stream, static_cast<Word*>(destination), count, word);
}

}  // namespace

void launch_fill_kernel(void* destination, std::size_t count, const void* value, std::size_t value_bytes,
                        stream_ref stream) {
  const auto address = reinterpret_cast<std::uintptr_t>(destination);
  const bool word_aligned = address % value_bytes == 0;
  if (word_aligned && value_bytes == 2) launch_words<std::uint16_t>(destination, count, value, stream.get());
  else if (word_aligned && value_bytes == 4) launch_words<std::uint32_t>(destination, count, value, stream.get());
  else if (word_aligned && value_bytes == 8) launch_words<std::uint64_t>(destination, count, value, stream.get());
  else if (word_aligned && value_bytes == 16) launch_words<uint4>(destination, count, value, stream.get());
  else if (value_bytes <= max_pattern_bytes) {
    pattern bytes{};
    std::memcpy(bytes.bytes, value, value_bytes);
    constexpr unsigned int block = 256;
    launch(fill_pattern_bytes, {grid_for(count * value_bytes, block), block}, stream,
           static_cast<unsigned char*>(destination), count, bytes, value_bytes);
  } else {
    // Rare: element types over 64 bytes. Place one copy, then double the
    // filled prefix with device copies: log2(count) calls in all.
    auto* bytes = static_cast<unsigned char*>(destination);
    CUDAPMR_CHECK(cudaMemcpyAsync(bytes, value, value_bytes, cudaMemcpyDefault, stream.get()));
    for (std::size_t filled = 1; filled < count; filled *= 2) {
      const std::size_t copied = filled < count - filled ? filled : count - filled;
      CUDAPMR_CHECK(cudaMemcpyAsync(bytes + filled * value_bytes, bytes, copied * value_bytes, cudaMemcpyDefault,
                                    stream.get()));
    }
    CUDAPMR_CHECK(cudaStreamSynchronize(stream.get()));  // `value` may not outlive this call
  }
}

}  // namespace cudapmr::detail
