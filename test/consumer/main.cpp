// SPDX-License-Identifier: Apache-2.0
// Uses the installed headers and libraries, each component: the core
// (version, host resource, buffers, pmr), interop (DLPack), multiprocess (a
// socket pair) and, where installed, nccl (its error category).
#include <cudapmr/cudapmr.hpp>
#include <cudapmr/interop/dlpack.hpp>
#include <cudapmr/multiprocess/ipc_channel.hpp>
#ifdef CONSUMER_HAS_NCCL
#include <cudapmr/nccl/error.hpp>
#endif

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
  auto [one, other] = cudapmr::ipc_channel::make_pair();
  one.send_value(42);
  if (other.receive_value<int>() != 42) {
    std::printf("FAIL: a value sent over the socket pair came back different\n");
    return 1;
  }
  const char* nccl = "not installed";
#ifdef CONSUMER_HAS_NCCL
  nccl = cudapmr::nccl_category().name();
#endif
  // Links cudart: answers 0 where there is no GPU.
  std::printf("cudapmr %s from an installed package: host resource, buffer, DLPack and a socket pair work; "
              "nccl: %s; %d CUDA device(s)\n",
              cudapmr::version_string().data(), nccl, cudapmr::device::count());
  return 0;
}
