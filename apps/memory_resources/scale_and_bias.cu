#include "scale_and_bias.hpp"

#include <cudapmr/device.hpp>
#include <cudapmr/error.hpp>

namespace demo {
namespace {

__global__ void scale_and_bias_kernel(float* data, std::size_t count, float scale, float bias) {
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count; i += stride)
    data[i] = data[i] * scale + bias;
}

}  // namespace

void scale_and_bias(float* data, std::size_t count, float scale, float bias, cudapmr::stream_ref stream) {
  if (count == 0) return;
  constexpr unsigned int block = 256;
  constexpr std::size_t max_blocks = 4096;  // grid-stride loop covers the rest
  const std::size_t blocks = (count + block - 1) / block;
  scale_and_bias_kernel<<<static_cast<unsigned int>(blocks < max_blocks ? blocks : max_blocks), block, 0,
                          stream.get()>>>(data, count, scale, bias);
  CUDAPMR_CHECK(cudaGetLastError());
}

}  // namespace demo
