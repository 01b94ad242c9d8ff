// SPDX-License-Identifier: Apache-2.0
// Processes that end with memory still held, one scenario per run, each of
// which must exit with status 0 and never crash on the way out:
//   cudapmr_lifetime_exit host-static   static adaptors over a static host
//                                       resource, caches full, and a static
//                                       buffer that outlives its resource
//   cudapmr_lifetime_exit host-copy-at-exit
//                                       the library's host copy pool used by
//                                       an exit handler registered before
//                                       its first use (as a staged copy at
//                                       exit uses it), with all its threads
//   cudapmr_lifetime_exit gpu-pooled    the default resources with memory
//                                       pooled, a static caching_resource and
//                                       the default pinned cache full, a
//                                       buffer that outlives its stream and
//                                       one that outlives its resource
//   cudapmr_lifetime_exit gpu-exit      std::exit with resources, buffers and
//                                       streams alive on the stack
//   cudapmr_lifetime_exit gpu-staging-at-exit
//                                       a staged copy after the statics made
//                                       at the first staged copy would have
//                                       been destroyed (an exit handler's copy
//                                       stands in for another thread's)
//   cudapmr_lifetime_exit gpu-default-stack
//                                       the default device stack, whose exit
//                                       handler gives back what is idle, with
//                                       blocks cached for two streams gone by
//                                       then, a static buffer and a graph
//                                       captured over the stack, launched and
//                                       never destroyed
// Exit status 77 where a GPU scenario finds no GPU (CTest reports a skip).
#include <cudapmr/adaptors/caching_resource.hpp>
#include <cudapmr/adaptors/statistics_adaptor.hpp>
#include <cudapmr/adaptors/tracking_adaptor.hpp>
#include <cudapmr/cudapmr.hpp>
#include <cudapmr/detail/host_thread_pool.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory_resource>
#include <optional>
#include <span>
#include <string_view>
#include <thread>
#include <vector>

namespace {

constexpr int exit_skipped = 77;

/// Allocates and frees a mix of sizes through `resource`'s pmr and stream-ordered
/// paths, so that its caches and pool keep memory when the process ends.
void leave_memory_pooled(cudapmr::stream_ordered_resource& resource, cudapmr::stream_ref stream) {
  std::vector<void*> blocks;
  for (std::size_t bytes = 256; bytes <= (std::size_t{1} << 22); bytes *= 4) {
    blocks.push_back(resource.allocate_async(bytes, stream));
    void* p = resource.allocate(bytes);
    resource.deallocate(p, bytes);
  }
  std::size_t bytes = 256;
  for (void* p : blocks) {
    resource.deallocate_async(p, bytes, stream);
    bytes *= 4;
  }
}

int host_static() {
  // Constructed in this order, destroyed in the reverse one at exit: the
  // buffer (empty until it is given memory below) outlives every resource.
  static cudapmr::buffer<int> outliving;
  static cudapmr::host_memory_resource host;
  static cudapmr::caching_resource caching(host);
  static cudapmr::statistics_adaptor statistics(caching);
  static cudapmr::tracking_adaptor tracking(statistics);
  leave_memory_pooled(tracking, cudapmr::stream_ref{});
  outliving = cudapmr::buffer<int>(tracking, 1000, cudapmr::stream_ref{});
  static std::pmr::vector<int> values(1000, 7, &caching);  // destroyed before its resource
  std::puts("host-static: returning from main with caches full and a buffer open");
  return 0;
}

/// Copies 8 MiB over the library's host copy pool and checks the copy and the
/// pool's threads (all of them, not only the caller); exits with status 1 if
/// anything is wrong. On a machine of one hardware thread the pool has no
/// workers, and only the copy is checked.
void pooled_copy(const char* when) {
  cudapmr::detail::host_thread_pool& pool = cudapmr::detail::host_copy_pool();
  const std::size_t threads = cudapmr::detail::host_copy_threads(std::thread::hardware_concurrency());
  if (pool.concurrency() != threads) {
    std::fprintf(stderr, "host-copy-at-exit: the copy pool %s has %zu threads, not %zu\n", when, pool.concurrency(),
                 threads);
    std::_Exit(1);
  }
  std::vector<unsigned char> source(std::size_t{8} << 20);
  for (std::size_t i = 0; i < source.size(); ++i) source[i] = static_cast<unsigned char>(i * 31 + 7);
  std::vector<unsigned char> destination(source.size());
  cudapmr::detail::parallel_memcpy(destination.data(), source.data(), source.size(), pool);
  if (destination == source) return;
  std::fprintf(stderr, "host-copy-at-exit: the pooled copy %s came back wrong\n", when);
  std::_Exit(1);
}

/// The check an exit handler of check_in_main_and_at_exit runs, and its scenario's name.
void (*exit_check)(const char* when) = nullptr;
const char* exit_check_scenario = "";

/// Registers an exit handler that runs `check("at exit")`, then runs
/// `check("in main")`: the handler runs after whatever the check's first run
/// registered for exit (statics destroyed then, if they are at all).
int check_in_main_and_at_exit(const char* scenario, void (*check)(const char* when)) {
  exit_check = check;
  exit_check_scenario = scenario;
  std::atexit([] {
    exit_check("at exit");
    std::printf("%s: the check at exit worked\n", exit_check_scenario);
    std::fflush(stdout);
  });
  check("in main");
  return 0;
}

int gpu_pooled() {
  static cudapmr::buffer<float> outliving_stream;
  static cudapmr::buffer<float> outliving_resource;
  static std::optional<cudapmr::stream> stream;
  static cudapmr::pinned_memory_resource pinned(cudapmr::pinned_pool_options{});
  static cudapmr::caching_resource caching(cudapmr::default_device_resource(0));
  static cudapmr::managed_memory_resource managed;
  stream.emplace(0);
  leave_memory_pooled(cudapmr::default_device_resource(0), *stream);
  leave_memory_pooled(caching, *stream);
  leave_memory_pooled(pinned, *stream);
  leave_memory_pooled(managed, *stream);
  static std::pmr::vector<double> pinned_values(4096, 1.5, &cudapmr::default_pinned_resource());  // cached at exit
  static std::pmr::vector<double> managed_values(4096, 2.5, &cudapmr::default_managed_resource());
  outliving_stream = cudapmr::buffer<float>(cudapmr::default_device_resource(0), 4096, *stream);
  outliving_resource = cudapmr::buffer<float>(pinned, 4096, *stream);
  outliving_stream.fill(2.0f, *stream);
  std::puts("gpu-pooled: returning from main with pools, caches and buffers holding memory");
  return 0;
}

[[noreturn]] void gpu_exit() {
  const cudapmr::stream stream(0);
  cudapmr::device_memory_resource owned(0, cudapmr::device_pool_options{.initial_size = std::size_t{1} << 24});
  cudapmr::caching_resource caching(owned);
  cudapmr::buffer<int> open(caching, 1 << 20, stream);
  open.fill(3, stream);
  leave_memory_pooled(caching, stream);
  std::puts("gpu-exit: calling std::exit with everything alive");
  std::fflush(stdout);
  std::exit(0);  // no destructor of this frame runs: the driver takes the memory back
}

/// Copies 4 MiB of pageable memory to the device and back (both ways staged
/// through pinned memory) and checks it; exits with status 1 if anything is wrong.
void staged_round_trip(const char* when) {
  try {
    const cudapmr::stream stream(0);
    std::vector<int> values(1 << 20);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int>(i * 7);
    cudapmr::buffer<int> on_device(cudapmr::default_device_resource(0), values.size(), stream);
    on_device.copy_from(std::span<const int>(values), stream);
    std::vector<int> back(values.size());
    on_device.copy_to(std::span<int>(back), stream);
    stream.synchronize();
    if (back == values) return;
    std::fprintf(stderr, "gpu-staging-at-exit: the staged copy %s came back wrong\n", when);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "gpu-staging-at-exit: the staged copy %s failed: %s\n", when, error.what());
  }
  std::_Exit(1);
}

int gpu_staging_at_exit() {
  // CUDA first, so that the exit handler runs before CUDA's own teardown.
  static_cast<void>(cudaFree(nullptr));
  return check_in_main_and_at_exit("gpu-staging-at-exit", staged_round_trip);
}

/// Exits with status 1, naming the call, unless `status` is cudaSuccess.
void require(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  std::fprintf(stderr, "gpu-default-stack: %s failed: %s\n", call, cudaGetErrorName(status));
  std::_Exit(1);
}

int gpu_default_stack() {
  cudapmr::device_stack& stack = cudapmr::default_device_stack(0);
  // Made after the stack, so destroyed at exit before its handler runs (each
  // waiting for its work): the handler meets blocks cached for streams gone.
  static std::optional<cudapmr::stream> first;
  static std::optional<cudapmr::stream> second;
  first.emplace(0);
  second.emplace(0);
  leave_memory_pooled(stack, *first);
  leave_memory_pooled(stack, *second);
  static cudapmr::buffer<float> outliving_main(stack, std::size_t{1} << 22, *first);  // freed at exit, before the streams go
  outliving_main.fill(1.0f, *first);
  // A graph that allocates, uses and frees 1 MiB over the stack, launched
  // once and never destroyed: its memory must stay mapped through the exit.
  constexpr std::size_t bytes = std::size_t{1} << 20;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t launchable = nullptr;
  require(cudaStreamBeginCapture(second->get(), cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  void* temporary = stack.allocate_async(bytes, *second);
  require(cudaMemsetAsync(temporary, 0, bytes, second->get()), "cudaMemsetAsync");
  stack.deallocate_async(temporary, bytes, *second);
  require(cudaStreamEndCapture(second->get(), &graph), "cudaStreamEndCapture");
  require(cudaGraphInstantiate(&launchable, graph, 0), "cudaGraphInstantiate");
  require(cudaGraphLaunch(launchable, second->get()), "cudaGraphLaunch");
  std::puts("gpu-default-stack: returning from main with the default stack holding cached, live and graph memory");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view scenario = argc > 1 ? argv[1] : "";
  if (scenario == "host-static") return host_static();
  if (scenario == "host-copy-at-exit") return check_in_main_and_at_exit("host-copy-at-exit", pooled_copy);
  if (scenario != "gpu-pooled" && scenario != "gpu-exit" && scenario != "gpu-staging-at-exit" &&
      scenario != "gpu-default-stack") {
    std::fprintf(stderr,
                 "usage: cudapmr_lifetime_exit "
                 "host-static|host-copy-at-exit|gpu-pooled|gpu-exit|gpu-staging-at-exit|gpu-default-stack\n");
    return 2;
  }
  if (cudapmr::device::count() == 0) {
    std::puts("no CUDA device was found: skipped");
    return exit_skipped;
  }
  if (scenario == "gpu-pooled") return gpu_pooled();
  if (scenario == "gpu-staging-at-exit") return gpu_staging_at_exit();
  if (scenario == "gpu-default-stack") return gpu_default_stack();
  gpu_exit();
}
