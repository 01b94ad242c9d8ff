// SPDX-License-Identifier: Apache-2.0
// Sharing pool memory with another process (ipc.hpp): the lifetime protocol
// end to end with a second process on the same GPU, and the refusals.
#include "support/gpu.hpp"

#include <cudapmr/buffer.hpp>
#include <cudapmr/device_memory_resource.hpp>
#include <cudapmr/error.hpp>
#include <cudapmr/multiprocess/ipc.hpp>
#include <cudapmr/multiprocess/process.hpp>
#include <cudapmr/virtual_memory_resource.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace cudapmr::test {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t word_count = (std::size_t{16} << 20) / sizeof(std::uint32_t);

/// The peer program, built next to this test binary.
std::filesystem::path peer_program() { return current_executable().parent_path() / "cudapmr_ipc_peer"; }

/// Starts the peer in `role` and accepts its connection; gives up at once if the peer ends first.
struct peer_connection {
  peer_connection(ipc_listener& listener, std::vector<std::string> role)
      : process(peer_program(), [&] {
          role.insert(role.begin(), listener.socket_path().string());
          return role;
        }()),
        channel(listener.accept(60s, [this] { return !process.try_wait(); })) {}

  child_process process;
  ipc_channel channel;
};

TEST(Ipc, AnotherProcessReadsAndWritesThePoolsMemory) {
  CUDAPMR_REQUIRE_GPU();
  device_memory_resource pool(0, device_pool_options{.ipc_enabled = true});
  const cudapmr::stream stream(0);
  std::vector<std::uint32_t> words(word_count);
  std::iota(words.begin(), words.end(), 1000u);
  buffer<std::uint32_t> shared(pool, word_count, stream);
  shared.copy_from(std::span<const std::uint32_t>(words), stream);

  ipc_listener listener;
  peer_connection peer(listener, {"verify-and-write", "1000", "5000"});
  send_shared_memory(peer.channel, pool, shared, stream);
  wait_for_release(peer.channel);  // the peer has closed its view: the memory may go from here on
  EXPECT_EQ(peer.process.wait(), 0) << "the peer saw other values than the ones written here";

  shared.copy_to(std::span<std::uint32_t>(words), stream);
  stream.synchronize();
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < words.size(); ++i) mismatches += words[i] != 5000u + static_cast<std::uint32_t>(i);
  EXPECT_EQ(mismatches, 0u) << "the peer's writes are not visible here";
}

/// Starts the peer in `role`, lets `send` tell it about a buffer of an IPC
/// pool, and returns the peer's exit status (0: it could not open the memory).
/// The pool is exported as a real exporter's would be (CUDA describes memory
/// only of a pool already shared), but its descriptor never leaves this process.
template <class Send>
int refusing_peer_status(const char* role, Send send) {
  device_memory_resource pool(0, device_pool_options{.ipc_enabled = true});
  const cudapmr::stream stream(0);
  buffer<std::uint32_t> shared(pool, 1024, stream);
  stream.synchronize();
  const file_descriptor kept_here = export_pool(pool);
  ipc_listener listener;
  peer_connection peer(listener, {role});
  send(peer.channel, shared);
  return peer.process.wait();
}

TEST(Ipc, AProcessWithoutThePoolsDescriptorCannotOpenTheMemory) {
  CUDAPMR_REQUIRE_GPU();
  const int status = refusing_peer_status("without-descriptor", [](ipc_channel& channel, const buffer<std::uint32_t>& shared) {
    channel.send_value(export_memory(shared));  // the description alone
  });
  EXPECT_EQ(status, 0) << "the peer opened memory it had no descriptor for";
}

TEST(Ipc, AnotherPoolsDescriptorDoesNotOpenTheMemory) {
  CUDAPMR_REQUIRE_GPU();
  const device_memory_resource other_pool(0, device_pool_options{.ipc_enabled = true});
  const int status = refusing_peer_status("wrong-pool", [&](ipc_channel& channel, const buffer<std::uint32_t>& shared) {
    const file_descriptor other_descriptor = export_pool(other_pool);
    channel.send_value(export_memory(shared), other_descriptor.get());
  });
  EXPECT_EQ(status, 0) << "the peer opened the memory through another pool";
}

TEST(Ipc, AnImporterRefusesADescriptionOfMoreBytesThanTheAllocationHolds) {
  CUDAPMR_REQUIRE_GPU();
  const int status = refusing_peer_status("oversized", [](ipc_channel& channel, const buffer<std::uint32_t>& shared) {
    const auto& pool = dynamic_cast<const pool_resource&>(*shared.resource());
    const file_descriptor descriptor = export_pool(pool);
    ipc_memory_handle lying = export_memory(shared);
    lying.bytes = std::size_t{1} << 40;  // a peer that lies: a view of 1 TiB would reach other memory
    channel.send_value(lying, descriptor.get());
  });
  EXPECT_EQ(status, 0) << "the peer opened a view larger than the allocation (or refused without naming the sizes)";
}

TEST(Ipc, ExportingMoreBytesThanTheAllocationHoldsIsRefused) {
  CUDAPMR_REQUIRE_GPU();
  device_memory_resource pool(0, device_pool_options{.ipc_enabled = true});
  const cudapmr::stream stream(0);
  buffer<std::uint32_t> shared(pool, 1024, stream);
  stream.synchronize();
  const file_descriptor exported = export_pool(pool);
  try {
    static_cast<void>(export_memory(shared.data(), std::size_t{1} << 40));
    ADD_FAILURE() << "described 1 TiB of a 4 KiB buffer";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("1099511627776"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("allocation holds"), std::string::npos) << error.what();
  }
  EXPECT_NO_THROW(static_cast<void>(export_memory(shared)));
}

TEST(Ipc, APoolWithoutIpcCannotBeExported) {
  CUDAPMR_REQUIRE_GPU();
  const device_memory_resource pool(0, device_pool_options{});
  try {
    static_cast<void>(export_pool(pool));
    ADD_FAILURE() << "a pool made without ipc_enabled was exported";
  } catch (const cuda_error& error) {
    EXPECT_NE(std::string(error.what()).find("ipc_enabled"), std::string::npos) << error.what();
  }
}

TEST(Ipc, ADescriptorThatIsNotAPoolIsRefused) {
  CUDAPMR_REQUIRE_GPU();
  EXPECT_THROW(imported_pool pool(file_descriptor(::open("/dev/null", O_RDONLY | O_CLOEXEC))), cuda_error);
}

TEST(Ipc, AClosedDescriptorIsRefusedBeforeCudaIsAsked) {
  try {
    const imported_pool pool{file_descriptor{}};
    ADD_FAILURE() << "imported a pool from no descriptor";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("closed"), std::string::npos) << error.what();
  }
}

TEST(Ipc, ExportingNullMemoryIsRefused) {
  EXPECT_THROW(static_cast<void>(export_memory(nullptr, 64)), std::invalid_argument);
}

TEST(Ipc, ReceivingSomethingElseThanSharedMemoryIsRefused) {
  auto [exporter, importer] = ipc_channel::make_pair(1s);
  exporter.send_value(std::uint64_t{42});
  EXPECT_THROW(static_cast<void>(receive_shared_memory(importer)), std::runtime_error);
}

// ---- allocations of a virtual_memory_resource --------------------------------

/// Writes `seed + i` to the words at `device_words` and waits for the copy.
void write_words(void* device_words, std::size_t count, std::uint32_t seed) {
  std::vector<std::uint32_t> words(count);
  std::iota(words.begin(), words.end(), seed);
  ASSERT_EQ(cudaMemcpy(device_words, words.data(), count * sizeof(std::uint32_t), cudaMemcpyDefault), cudaSuccess);
}

/// How many of the words at `device_words` differ from `seed + i`.
std::size_t mismatches_in(const void* device_words, std::size_t count, std::uint32_t seed) {
  std::vector<std::uint32_t> words(count);
  EXPECT_EQ(cudaMemcpy(words.data(), device_words, count * sizeof(std::uint32_t), cudaMemcpyDefault), cudaSuccess);
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < count; ++i) mismatches += words[i] != seed + static_cast<std::uint32_t>(i);
  return mismatches;
}

/// One exportable allocation of 16 MiB from a virtual_memory_resource of device 0, freed at the end.
class VirtualMemoryExport : public ::testing::Test {
 protected:
  static constexpr std::size_t bytes = word_count * sizeof(std::uint32_t);

  void SetUp() override {
    CUDAPMR_REQUIRE_GPU();
    resource_.emplace(0);
    if (!resource_->is_exportable()) GTEST_SKIP() << "the driver refused the POSIX file descriptor handle type";
    stream_.emplace(0);
    p_ = resource_->allocate_async(bytes, *stream_);
  }
  void TearDown() override {
    if (p_ != nullptr) resource_->deallocate_async(p_, bytes, *stream_);
  }

  std::optional<virtual_memory_resource> resource_;
  std::optional<cudapmr::stream> stream_;
  void* p_ = nullptr;
};

TEST_F(VirtualMemoryExport, AnImportInThisProcessMapsTheSameMemoryAtASecondAddress) {
  const virtual_memory_resource::exported_handle exported = resource_->export_handle(p_);
  ASSERT_GE(exported.descriptor, 0);
  EXPECT_EQ(exported.bytes, bytes) << "16 MiB is a multiple of the granularity";
  {
    imported_virtual_memory imported(file_descriptor(exported.descriptor), exported.bytes, 0);
    ASSERT_NE(imported.data(), p_);
    EXPECT_EQ(imported.size_bytes(), exported.bytes);
    ASSERT_NO_FATAL_FAILURE(write_words(p_, word_count, 77));
    EXPECT_EQ(mismatches_in(imported.data(), word_count, 77), 0u) << "the second address maps other memory";
    ASSERT_NO_FATAL_FAILURE(write_words(imported.data(), word_count, 300));
    EXPECT_EQ(mismatches_in(p_, word_count, 300), 0u);
  }
  EXPECT_THROW(static_cast<void>(resource_->export_handle(static_cast<char*>(p_) + 4096)), std::invalid_argument)
      << "only the start of an allocation is exported";
}

TEST_F(VirtualMemoryExport, AnotherProcessReadsAndWritesTheAllocation) {
  ASSERT_NO_FATAL_FAILURE(write_words(p_, word_count, 2000));
  ipc_listener listener;
  peer_connection peer(listener, {"verify-and-write-virtual", "2000", "9000"});
  send_virtual_memory(peer.channel, *resource_, p_, *stream_);
  wait_for_release(peer.channel);
  EXPECT_EQ(peer.process.wait(), 0) << "the peer saw other values than the ones written here";
  EXPECT_EQ(mismatches_in(p_, word_count, 9000), 0u) << "the peer's writes are not visible here";
}

TEST_F(VirtualMemoryExport, ABadDeviceOrdinalIsRefusedBeforeTheMessageIsTaken) {
  auto [exporter, importer] = ipc_channel::make_pair(5s);
  send_virtual_memory(exporter, *resource_, p_, *stream_);
  EXPECT_THROW(static_cast<void>(receive_virtual_memory(importer, -1)), std::invalid_argument);
  // The message and its descriptor wait for a call with a good ordinal.
  const imported_virtual_memory imported = receive_virtual_memory(importer, 0);
  EXPECT_EQ(imported.size_bytes(), bytes);
}

TEST(VirtualMemoryIpc, ADescriptorThatIsNotAnAllocationIsRefused) {
  CUDAPMR_REQUIRE_GPU();
  EXPECT_THROW(imported_virtual_memory memory(file_descriptor(::open("/dev/null", O_RDONLY | O_CLOEXEC)), 4096, 0),
               cuda_error);
}

TEST(VirtualMemoryIpc, AClosedDescriptorOrZeroBytesAreRefusedBeforeCudaIsAsked) {
  try {
    const imported_virtual_memory memory(file_descriptor{}, 4096, 0);
    ADD_FAILURE() << "imported memory from no descriptor";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("closed"), std::string::npos) << error.what();
  }
  EXPECT_THROW(imported_virtual_memory(file_descriptor(::open("/dev/null", O_RDONLY | O_CLOEXEC)), 0, 0),
               std::invalid_argument);
}

TEST(VirtualMemoryIpc, ReceivingSomethingElseThanVirtualMemoryIsRefused) {
  auto [exporter, importer] = ipc_channel::make_pair(1s);
  exporter.send_value(std::uint64_t{42});
  EXPECT_THROW(static_cast<void>(receive_virtual_memory(importer, 0)), std::runtime_error);
}

}  // namespace
}  // namespace cudapmr::test
