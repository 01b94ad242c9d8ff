// SPDX-License-Identifier: Apache-2.0
// The other process of the IPC tests (ipc_test.cpp): it connects to the
// test's socket and plays one role. Exit status: 0 the role's expectation
// held, 1 it did not (the reason on stderr), 2 unusable arguments or an error.
//
//   cudapmr_ipc_peer SOCKET verify-and-write SEED_IN SEED_OUT
//       opens the shared memory, checks that word i is SEED_IN + i, writes
//       SEED_OUT + i, and releases it (the lifetime protocol of ipc.hpp)
//   cudapmr_ipc_peer SOCKET verify-and-write-virtual SEED_IN SEED_OUT
//       the same for an allocation of a virtual_memory_resource (send_virtual_memory)
//   cudapmr_ipc_peer SOCKET without-descriptor
//       receives a memory description with no pool descriptor and must fail to open it
//   cudapmr_ipc_peer SOCKET wrong-pool
//       receives a description with another pool's descriptor and must fail to open it
//   cudapmr_ipc_peer SOCKET oversized
//       receives the pool and a description that claims more bytes than the
//       allocation holds, and must refuse to open it, naming both sizes
#include <cudapmr/error.hpp>
#include <cudapmr/multiprocess/ipc.hpp>

#include <fcntl.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using cudapmr::file_descriptor;
using cudapmr::imported_pool;
using cudapmr::ipc_channel;
using cudapmr::ipc_memory_handle;

/// Counts the words of `words` (device memory) that differ from `seed_in + i`, then writes `seed_out + i`.
std::size_t check_and_rewrite(std::span<std::uint32_t> words, std::uint32_t seed_in, std::uint32_t seed_out) {
  std::vector<std::uint32_t> host(words.size());
  CUDAPMR_CHECK(cudaMemcpy(host.data(), words.data(), words.size_bytes(), cudaMemcpyDefault));
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < host.size(); ++i) {
    if (host[i] != seed_in + static_cast<std::uint32_t>(i)) ++mismatches;
    host[i] = seed_out + static_cast<std::uint32_t>(i);
  }
  CUDAPMR_CHECK(cudaMemcpy(words.data(), host.data(), words.size_bytes(), cudaMemcpyDefault));
  if (mismatches != 0) std::fprintf(stderr, "ipc peer: %zu of %zu words differ from the sequence\n", mismatches, host.size());
  return mismatches;
}

int verify_and_write(ipc_channel& channel, std::uint32_t seed_in, std::uint32_t seed_out) {
  cudapmr::shared_memory memory = cudapmr::receive_shared_memory(channel);
  const std::size_t mismatches = check_and_rewrite(memory.view.span<std::uint32_t>(), seed_in, seed_out);
  cudapmr::release_shared_memory(channel, std::move(memory), cudapmr::stream_ref{});
  return mismatches == 0 ? 0 : 1;
}

int verify_and_write_virtual(ipc_channel& channel, std::uint32_t seed_in, std::uint32_t seed_out) {
  cudapmr::imported_virtual_memory memory = cudapmr::receive_virtual_memory(channel, 0);
  const std::size_t mismatches = check_and_rewrite(memory.span<std::uint32_t>(), seed_in, seed_out);
  cudapmr::release_virtual_memory(channel, std::move(memory), cudapmr::stream_ref{});
  return mismatches == 0 ? 0 : 1;
}

/// Exit status 0 where `open` throws cuda_error, as it must.
template <class Open>
int expect_refusal(const char* what, Open open) {
  try {
    open();
  } catch (const cudapmr::cuda_error& error) {
    std::fprintf(stderr, "ipc peer: refused as expected (%s): %s\n", what, error.what());
    return 0;
  }
  std::fprintf(stderr, "ipc peer: %s opened the memory\n", what);
  return 1;
}

int without_descriptor(ipc_channel& channel) {
  auto [memory, descriptor] = channel.receive_value_with_descriptor<ipc_memory_handle>();
  if (descriptor.is_open()) {
    std::fprintf(stderr, "ipc peer: a descriptor came along; this role expects none\n");
    return 2;
  }
  // All this process can try is a descriptor of its own making.
  return expect_refusal("a descriptor of /dev/null", [&, handle = memory] {
    const imported_pool pool(file_descriptor(::open("/dev/null", O_RDONLY | O_CLOEXEC)));
    static_cast<void>(pool.open(handle));
  });
}

int wrong_pool(ipc_channel& channel) {
  auto [memory, descriptor] = channel.receive_value_with_descriptor<ipc_memory_handle>();
  const imported_pool other(std::move(descriptor));  // a real pool, but not the memory's
  return expect_refusal("another pool's descriptor", [&, handle = memory] { static_cast<void>(other.open(handle)); });
}

int oversized(ipc_channel& channel) {
  auto [memory, descriptor] = channel.receive_value_with_descriptor<ipc_memory_handle>();
  const imported_pool pool(std::move(descriptor));
  try {
    const cudapmr::ipc_memory_view view = pool.open(memory);
    std::fprintf(stderr, "ipc peer: opened a view of %zu bytes\n", view.size_bytes());
    return 1;
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    const bool names_both = message.find(std::to_string(memory.bytes)) != std::string::npos &&
                            message.find("allocation holds") != std::string::npos;
    std::fprintf(stderr, "ipc peer: refused (%s): %s\n", names_both ? "as expected" : "without the sizes",
                 message.c_str());
    return names_both ? 0 : 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> arguments(argv + 1, argv + argc);
  try {
    if (arguments.size() < 2) throw std::invalid_argument("usage: cudapmr_ipc_peer SOCKET ROLE [ARGUMENTS]");
    ipc_channel channel = ipc_channel::connect(arguments[0], std::chrono::seconds(60));
    const std::string& role = arguments[1];
    if (role == "verify-and-write" && arguments.size() == 4)
      return verify_and_write(channel, static_cast<std::uint32_t>(std::stoul(arguments[2])),
                              static_cast<std::uint32_t>(std::stoul(arguments[3])));
    if (role == "verify-and-write-virtual" && arguments.size() == 4)
      return verify_and_write_virtual(channel, static_cast<std::uint32_t>(std::stoul(arguments[2])),
                                      static_cast<std::uint32_t>(std::stoul(arguments[3])));
    if (role == "without-descriptor") return without_descriptor(channel);
    if (role == "wrong-pool") return wrong_pool(channel);
    if (role == "oversized") return oversized(channel);
    throw std::invalid_argument("unknown role or arguments: " + role);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "ipc peer: %s\n", error.what());
    return 2;
  }
}
