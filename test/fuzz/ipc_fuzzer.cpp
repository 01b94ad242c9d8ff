// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: what arrives from another process. Each input is a series
// of messages (bytes of any length, some with a file descriptor attached)
// sent over a socket pair and read by the importer's side of the lifetime
// protocol (receive_shared_memory, wait_for_release) or as a raw memory
// description. Whatever arrives, the reader must answer with an exception
// (a wrong size, a foreign message, a descriptor that is no pool, no GPU)
// and never crash, leak a descriptor or read past what came; the sanitizers
// and a count of open descriptors check that.
#include <cudapmr/multiprocess/ipc.hpp>
#include <cudapmr/multiprocess/ipc_channel.hpp>

#include <cuda_runtime_api.h>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <vector>

namespace {

using namespace cudapmr;

std::size_t open_descriptors() {
  std::size_t count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++count;
  return count;
}

/// Reads one message from `importer` the way the step chosen by `reader` does.
void read_one(ipc_channel& importer, std::uint8_t reader) {
  switch (reader % 4) {
    case 0: {
      shared_memory memory = receive_shared_memory(importer);  // only with a GPU and a real pool
      break;
    }
    case 1:
      wait_for_release(importer);
      break;
    case 2: {
      auto [description, descriptor] = importer.receive_value_with_descriptor<ipc_memory_handle>();
      if (descriptor.is_open()) {
        const imported_pool pool(std::move(descriptor));
        static_cast<void>(pool.open(description));
      }
      break;
    }
    default: {
      std::vector<std::byte> any(1 + reader % 64);
      static_cast<void>(importer.receive(any));
      break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // CUDA opens a few descriptors of its own the first time it is asked
  // anything: a small allowance over the first count, which a descriptor
  // leaked per input exceeds within a few inputs.
  static const std::size_t descriptors_before = [] {
    static_cast<void>(cudaFree(nullptr));
    static_cast<void>(cudaGetLastError());
    return open_descriptors() + 8;
  }();
  {
    auto [exporter, importer] = ipc_channel::make_pair(std::chrono::milliseconds(1));
    std::size_t at = 0;
    while (at + 3 <= size) {
      const std::uint8_t length = data[at];
      const std::uint8_t flags = data[at + 1];
      const std::uint8_t reader = data[at + 2];
      at += 3;
      const std::size_t payload = std::min<std::size_t>(length, size - at);
      const int attached = (flags & 1) != 0 ? ::open("/dev/null", O_RDONLY | O_CLOEXEC) : -1;
      try {
        exporter.send(std::span<const std::byte>(reinterpret_cast<const std::byte*>(data + at), payload), attached);
      } catch (const std::exception&) {
        // an empty message is refused: nothing went out
      }
      if (attached >= 0) ::close(attached);
      at += payload;
      try {
        read_one(importer, reader);
      } catch (const std::exception&) {
        // refused, as it should be
      }
    }
  }
  if (open_descriptors() > descriptors_before) {
    std::fprintf(stderr, "ipc fuzzer: %zu descriptors open, more than the %zu allowed\n", open_descriptors(),
                 descriptors_before);
    std::abort();
  }
  return 0;
}
