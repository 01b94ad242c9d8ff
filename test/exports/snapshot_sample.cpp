// SPDX-License-Identifier: Apache-2.0
// Writes the three exports of a known host-memory run into a folder, for
// check_snapshot_exports.py: statistics over a history (with call stacks)
// over a cache over a 16 MiB host resource, on two streams, in two
// annotated phases (the second's name not valid UTF-8), ending in a refused
// 64 MiB request.
#include <cudapmr/cudapmr.hpp>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <vector>

namespace {

cudaStream_t fake_stream(std::uintptr_t id) { return reinterpret_cast<cudaStream_t>(id * 0x1000); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: snapshot_sample FOLDER\n");
    return 2;
  }
  const std::filesystem::path folder(argv[1]);
  constexpr std::size_t kibibyte = 1024;
  cudapmr::host_memory_resource leaf(16 * 1024 * kibibyte);
  cudapmr::caching_resource cache(leaf);
  cudapmr::history_adaptor history(cache, {.capture_call_stacks = true});
  cudapmr::statistics_adaptor counted(history);

  std::vector<std::pair<void*, std::size_t>> live;
  {
    const cudapmr::scoped_annotation phase(history, "fill");
    for (std::size_t i = 1; i <= 8; ++i) {
      const std::size_t bytes = i * 64 * kibibyte;
      live.emplace_back(counted.allocate_async(bytes, fake_stream(1 + i % 2)), bytes);
    }
  }
  {
    // An overlong '/', a surrogate and a sequence cut off: check_snapshot_exports.py knows these bytes.
    const cudapmr::scoped_annotation phase(history, "drain \xc0\xaf\xed\xa0\x80\xe2\x82");
    for (std::size_t i = 0; i < live.size(); i += 2) counted.deallocate_async(live[i].first, live[i].second, fake_stream(1));
  }
  int refused = 0;
  try {
    static_cast<void>(counted.allocate_async(64 * 1024 * kibibyte, fake_stream(2)));
  } catch (const cudapmr::out_of_memory& error) {
    refused = error.report() != nullptr ? 1 : 0;
  }
  const cudapmr::memory_snapshot taken = cudapmr::snapshot(counted);
  cudapmr::write_file(folder / "snapshot.json", cudapmr::to_json(taken));
  cudapmr::write_file(folder / "snapshot.pickle", cudapmr::to_pytorch_pickle(taken));
  cudapmr::write_file(folder / "trace.json", cudapmr::to_chrome_trace(taken));
  std::printf("statistics peak: %lld bytes\nrefused with a report: %d\n",
              static_cast<long long>(counted.statistics().bytes.peak), refused);
  for (std::size_t i = 1; i < live.size(); i += 2) counted.deallocate_async(live[i].first, live[i].second, fake_stream(2));
  return 0;
}
