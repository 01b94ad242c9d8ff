// SPDX-License-Identifier: Apache-2.0
// NCCL communicators and registered buffers over cudapmr resources.
#include "support/gpu.hpp"

#include <cudapmr/buffer.hpp>
#include <cudapmr/nccl/communicator.hpp>
#include <cudapmr/nccl/error.hpp>
#include <cudapmr/nccl/memory_resource.hpp>
#include <cudapmr/nccl/registration.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <vector>

namespace cudapmr::test {
namespace {

TEST(NcclRegistration, RefusesNullArguments) {
  int word = 0;
  EXPECT_THROW(nccl_registration(nullptr, &word, sizeof(word)), std::invalid_argument);
  nccl_registration none;
  EXPECT_FALSE(none.is_registered());
  none.reset();  // nothing to do
}

TEST(NcclCommunicator, RefusesRanksOutOfRange) {
  const ncclUniqueId id{};
  EXPECT_THROW(nccl_communicator(id, 2, 2, 0), std::invalid_argument);
  EXPECT_THROW(nccl_communicator(id, 0, 0, 0), std::invalid_argument);
  EXPECT_THROW(nccl_communicator(id, 2, -1, 0), std::invalid_argument);
  EXPECT_THROW(static_cast<void>(nccl_communicator::create_all({})), std::invalid_argument);
}

TEST(NcclCommunicator, ARankJoinsThroughAUniqueId) {
  CUDAPMR_REQUIRE_GPU();
  const ncclUniqueId id = nccl_communicator::make_unique_id();
  const nccl_communicator communicator(id, 1, 0, 0);
  EXPECT_NE(communicator.get(), nullptr);
  EXPECT_EQ(communicator.rank(), 0);
  EXPECT_EQ(communicator.size(), 1);
  EXPECT_EQ(communicator.device(), 0);
}

TEST(NcclCommunicator, RegisteredBuffersAllReduceOnEveryDevice) {
  CUDAPMR_REQUIRE_GPU();
  std::vector<int> devices(static_cast<std::size_t>(device::count()));
  std::iota(devices.begin(), devices.end(), 0);
  std::vector<nccl_communicator> communicators = nccl_communicator::create_all(devices);
  ASSERT_EQ(communicators.size(), devices.size());

  struct rank_state {
    explicit rank_state(int device, std::size_t count)
        : resource(device), stream(device), send(resource, count, stream), receive(resource, count, stream) {}
    nccl_memory_resource resource;
    cudapmr::stream stream;
    buffer<float> send;
    buffer<float> receive;
    nccl_registration send_registration;
    nccl_registration receive_registration;
  };
  constexpr std::size_t count = std::size_t{1} << 20;
  std::vector<std::unique_ptr<rank_state>> ranks;
  for (const nccl_communicator& communicator : communicators) {
    EXPECT_EQ(communicator.device(), devices[static_cast<std::size_t>(communicator.rank())]);
    auto& rank = *ranks.emplace_back(std::make_unique<rank_state>(communicator.device(), count));
    rank.send.fill(static_cast<float>(communicator.rank() + 1), rank.stream);
    rank.send_registration = nccl_registration(communicator.get(), rank.send);
    rank.receive_registration = nccl_registration(communicator.get(), rank.receive);
    EXPECT_TRUE(rank.send_registration.is_registered());
  }
  check_nccl(ncclGroupStart(), "ncclGroupStart");
  for (std::size_t i = 0; i < ranks.size(); ++i)
    check_nccl(ncclAllReduce(ranks[i]->send.data(), ranks[i]->receive.data(), count, ncclFloat, ncclSum,
                                     communicators[i].get(), ranks[i]->stream.get()),
                       "ncclAllReduce", communicators[i].get());
  check_nccl(ncclGroupEnd(), "ncclGroupEnd");

  const auto n = static_cast<float>(ranks.size());
  const float expected = n * (n + 1) / 2;  // 1 + 2 + ... + n, exact in float
  for (const auto& rank : ranks) {
    std::vector<float> result(count);
    rank->receive.copy_to(std::span<float>(result), rank->stream);
    rank->stream.synchronize();
    EXPECT_EQ(std::count(result.begin(), result.end(), expected), static_cast<std::ptrdiff_t>(count))
        << "on device " << rank->resource.device_id();
  }
}

}  // namespace
}  // namespace cudapmr::test
