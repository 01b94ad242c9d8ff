// SPDX-License-Identifier: Apache-2.0
// Uses the installed headers and library: version, host resource, buffers, pmr, DLPack.
#include <cudapmr/cudapmr.hpp>
#include <cudapmr/dlpack.hpp>

#include <cstdio>
#include <memory_resource>
#include <numeric>
#include <vector>

int main() {
  if (cudapmr::version() != cudapmr::header_version) {
    std::printf("FAIL: the library is %s but the headers are %s\n", cudapmr::version_string().data(), CUDAPMR_VERSION_STRING);
    return 1;
  }
  cudapmr::host_memory_resource host;
  std::pmr::vector<int> values(1000, &host);
  std::iota(values.begin(), values.end(), 1);
  cudapmr::buffer<int> copy(host, values.size(), {});
  copy.copy_from(std::span<const int>(values), {});
  DLManagedTensor* tensor = cudapmr::to_dlpack(std::move(copy));
  const std::span<int> view = cudapmr::view_dlpack<int>(*tensor);
  const bool same = std::equal(view.begin(), view.end(), values.begin(), values.end());
  tensor->deleter(tensor);
  if (!same) {
    std::printf("FAIL: the DLPack view differs from the values copied in\n");
    return 1;
  }
  // Links cudart: answers 0 where there is no GPU.
  std::printf("cudapmr %s from an installed package: host resource, buffer and DLPack work; %d CUDA device(s)\n",
              cudapmr::version_string().data(), cudapmr::device::count());
  return 0;
}
