// SPDX-License-Identifier: Apache-2.0
// A correct program, without cudapmr, that compute-sanitizer's initcheck (CUDA
// 13.0, driver 580, H200) reports as reading uninitialized memory when several
// host threads allocate from a stream-ordered pool: why the sanitizer run
// (test/run_sanitizers.sh) has one host thread drive the stress run's streams
// under initcheck. Not part of the build; on a GPU machine:
//
//   nvcc -std=c++17 -arch=sm_90 -o initcheck_pool_threads test/gpu_checks/initcheck_pool_threads.cu
//   for seed in $(seq 1 12); do
//     compute-sanitizer --tool initcheck ./initcheck_pool_threads 4 2 4000 $seed 7 | tail -1
//   done
//
// Arguments: threads, streams they share, operations, seed, and a mode of
// bits: 1 frees blocks on a random stream (which may be the thread's own)
// after an event, 2 makes a tenth of the allocations and frees on one shared
// stream with a synchronization (as a pmr path does), 4 turns the pool's
// three reuse policies off. Each thread allocates with
// cudaMallocFromPoolAsync, writes every byte with a kernel before anything
// reads it, adds to it, checks it and frees it; the program prints the bytes
// that lost their pattern (always 0). Which seeds draw reports changes from
// run to run.

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

namespace {

void check(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", call, cudaGetErrorString(status));
  std::exit(3);
}
#define CUDAPMR_REPRO_CHECK(call) check((call), #call)

__device__ unsigned char pattern_byte(unsigned seed, std::size_t i) { return static_cast<unsigned char>(seed + i * 7); }

__global__ void stamp(unsigned char* data, std::size_t bytes, unsigned seed) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < bytes; i += std::size_t{gridDim.x} * blockDim.x)
    data[i] = pattern_byte(seed, i);
}

__global__ void add(unsigned char* data, std::size_t bytes, unsigned char value) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < bytes; i += std::size_t{gridDim.x} * blockDim.x)
    data[i] = static_cast<unsigned char>(data[i] + value);
}

__global__ void verify(const unsigned char* data, std::size_t bytes, unsigned seed, unsigned char added,
                       unsigned long long* wrong) {
  unsigned long long local = 0;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < bytes; i += std::size_t{gridDim.x} * blockDim.x)
    local += data[i] != static_cast<unsigned char>(pattern_byte(seed, i) + added) ? 1 : 0;
  if (local != 0) atomicAdd(wrong, local);
}

unsigned grid_for(std::size_t bytes) { return static_cast<unsigned>(std::min<std::size_t>((bytes + 255) / 256, 1024)); }

struct live_block {
  unsigned char* data;
  std::size_t bytes;
  unsigned seed;
  unsigned char added;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s threads streams operations seed mode\n", argv[0]);
    return 2;
  }
  const int threads = std::atoi(argv[1]), stream_count = std::atoi(argv[2]), operations = std::atoi(argv[3]);
  const unsigned long long seed = std::strtoull(argv[4], nullptr, 10);
  const int mode = std::atoi(argv[5]);
  if (threads < 1 || stream_count < 1 || operations < 0) {
    std::fprintf(stderr, "threads (%d) and streams (%d) must be at least 1, operations (%d) at least 0\n", threads,
                 stream_count, operations);
    return 2;
  }
  const bool cross_stream = (mode & 1) != 0, shared_stream = (mode & 2) != 0, no_reuse = (mode & 4) != 0;
  CUDAPMR_REPRO_CHECK(cudaSetDevice(0));
  cudaMemPoolProps properties{};
  properties.allocType = cudaMemAllocationTypePinned;
  properties.location = {cudaMemLocationTypeDevice, 0};
  cudaMemPool_t pool = nullptr;
  CUDAPMR_REPRO_CHECK(cudaMemPoolCreate(&pool, &properties));
  unsigned long long keep_all = ~0ull;
  CUDAPMR_REPRO_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all));
  if (no_reuse) {
    int off = 0;
    CUDAPMR_REPRO_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseFollowEventDependencies, &off));
    CUDAPMR_REPRO_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &off));
    CUDAPMR_REPRO_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &off));
  }
  std::vector<cudaStream_t> streams(stream_count);
  for (cudaStream_t& stream : streams) CUDAPMR_REPRO_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaStream_t shared = nullptr;
  CUDAPMR_REPRO_CHECK(cudaStreamCreateWithFlags(&shared, cudaStreamNonBlocking));
  unsigned long long* wrong = nullptr;
  CUDAPMR_REPRO_CHECK(cudaMallocManaged(&wrong, sizeof *wrong));
  *wrong = 0;

  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      CUDAPMR_REPRO_CHECK(cudaSetDevice(0));
      std::mt19937_64 random(seed * 1000003ull + t);
      std::uniform_real_distribution<double> uniform(0, 1);
      const cudaStream_t stream = streams[t % stream_count];
      cudaEvent_t handed_over = nullptr;
      CUDAPMR_REPRO_CHECK(cudaEventCreateWithFlags(&handed_over, cudaEventDisableTiming));
      std::vector<live_block> live;
      unsigned next_seed = t * 100000u + 1;
      const auto release = [&](std::size_t index) {
        const live_block freed = live[index];
        live[index] = live.back();
        live.pop_back();
        verify<<<grid_for(freed.bytes), 256, 0, stream>>>(freed.data, freed.bytes, freed.seed, freed.added, wrong);
        CUDAPMR_REPRO_CHECK(cudaGetLastError());
        const double choice = uniform(random);
        if (shared_stream && choice < 0.1) {
          CUDAPMR_REPRO_CHECK(cudaStreamSynchronize(stream));
          CUDAPMR_REPRO_CHECK(cudaFreeAsync(freed.data, shared));
        } else if (cross_stream && stream_count > 1 && choice < 0.35) {
          const cudaStream_t other = streams[random() % stream_count];
          CUDAPMR_REPRO_CHECK(cudaEventRecord(handed_over, stream));
          CUDAPMR_REPRO_CHECK(cudaStreamWaitEvent(other, handed_over, 0));
          CUDAPMR_REPRO_CHECK(cudaFreeAsync(freed.data, other));
        } else {
          CUDAPMR_REPRO_CHECK(cudaFreeAsync(freed.data, stream));
        }
      };
      for (int i = 0; i < operations / threads; ++i) {
        const double choice = uniform(random);
        if (live.empty() || (choice < 0.35 && live.size() < 32)) {
          live_block made{nullptr, static_cast<std::size_t>(std::exp2(uniform(random) * 20)), next_seed++, 0};
          if (shared_stream && uniform(random) < 0.1) {
            CUDAPMR_REPRO_CHECK(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&made.data), made.bytes, pool, shared));
            CUDAPMR_REPRO_CHECK(cudaStreamSynchronize(shared));
          } else {
            CUDAPMR_REPRO_CHECK(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&made.data), made.bytes, pool, stream));
          }
          stamp<<<grid_for(made.bytes), 256, 0, stream>>>(made.data, made.bytes, made.seed);
          CUDAPMR_REPRO_CHECK(cudaGetLastError());
          live.push_back(made);
        } else if (choice < 0.6) {
          release(random() % live.size());
        } else {
          live_block& changed = live[random() % live.size()];
          const auto value = static_cast<unsigned char>(1 + random() % 255);
          changed.added = static_cast<unsigned char>(changed.added + value);
          add<<<grid_for(changed.bytes), 256, 0, stream>>>(changed.data, changed.bytes, value);
          CUDAPMR_REPRO_CHECK(cudaGetLastError());
        }
      }
      while (!live.empty()) release(live.size() - 1);
      CUDAPMR_REPRO_CHECK(cudaStreamSynchronize(stream));
      CUDAPMR_REPRO_CHECK(cudaEventDestroy(handed_over));
    });
  for (std::thread& worker : workers) worker.join();
  CUDAPMR_REPRO_CHECK(cudaDeviceSynchronize());
  const unsigned long long lost = *wrong;
  std::printf("%d threads over %d streams, %d operations, seed %llu, mode %d: %llu bytes lost their pattern\n", threads,
              stream_count, operations, seed, mode, lost);
  CUDAPMR_REPRO_CHECK(cudaFree(wrong));
  CUDAPMR_REPRO_CHECK(cudaStreamDestroy(shared));
  for (cudaStream_t stream : streams) CUDAPMR_REPRO_CHECK(cudaStreamDestroy(stream));
  CUDAPMR_REPRO_CHECK(cudaMemPoolDestroy(pool));
  return lost == 0 ? 0 : 1;
}
