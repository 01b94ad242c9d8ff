// SPDX-License-Identifier: Apache-2.0
// format.hpp: fmt formatters for reports, and byte sizes in binary units.
#include "support/resource_cases.hpp"

#include <cudapmr/interop/format.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace cudapmr::test {
namespace {

TEST(HumanBytes, UsesBinaryUnitsWithAtMostOneDecimal) {
  EXPECT_EQ(fmt::format("{}", human_bytes(0)), "0 B");
  EXPECT_EQ(fmt::format("{}", human_bytes(1023)), "1023 B");
  EXPECT_EQ(fmt::format("{}", human_bytes(1024)), "1 KiB");
  EXPECT_EQ(fmt::format("{}", human_bytes(1536)), "1.5 KiB");
  EXPECT_EQ(fmt::format("{}", human_bytes(std::size_t{3} << 29)), "1.5 GiB");
  EXPECT_EQ(fmt::format("{}", human_bytes(std::size_t{1} << 40)), "1 TiB");
  EXPECT_EQ(fmt::format("{}", human_bytes(1024 * 1024 - 1)), "1 MiB") << "1023.999 KiB rounds up a unit";
  EXPECT_EQ(fmt::format("{}", human_bytes(std::int64_t{-3} << 20)), "-3 MiB");
  EXPECT_EQ(fmt::format("{}", human_bytes(std::numeric_limits<std::uint64_t>::max())), "16 EiB");
  EXPECT_EQ(fmt::format("{}", human_bytes(std::numeric_limits<std::int64_t>::min())), "-8 EiB");
}

TEST(Formatters, MemoryKindsPrintTheirNames) {
  EXPECT_EQ(fmt::format("{}", memory_kind::device), "device");
  EXPECT_EQ(fmt::format("{}/{}/{}", memory_kind::pinned, memory_kind::managed, memory_kind::pageable),
            "pinned/managed/pageable");
  EXPECT_EQ(fmt::format("[{:>8}]", memory_kind::device), "[  device]");
}

TEST(Formatters, PoolStatsInHumanUnits) {
  const pool_stats stats{.reserved_current = std::size_t{2} << 30,
                         .reserved_high = std::size_t{2} << 30,
                         .used_current = std::size_t{3} << 29,
                         .used_high = 1536};
  EXPECT_EQ(fmt::format("{}", stats), "used 1.5 GiB (high 1.5 KiB), reserved 2 GiB (high 2 GiB)");
}

TEST(Formatters, StatisticsInHumanUnits) {
  host_memory_resource upstream;
  statistics_adaptor counted(upstream);
  void* p = counted.allocate_async(1536, stream_ref{});
  counted.deallocate_async(counted.allocate_async(2048, stream_ref{}), 2048, stream_ref{});
  EXPECT_EQ(fmt::format("{}", counted.statistics()),
            "current 1.5 KiB in 1 allocation, peak 3.5 KiB in 2, total 3.5 KiB in 2");
  counted.deallocate_async(p, 1536, stream_ref{});
  EXPECT_EQ(fmt::format("{}", counted.statistics()),
            "current 0 B in 0 allocations, peak 3.5 KiB in 2, total 3.5 KiB in 2");
}

TEST(Formatters, BuffersNameTypeCountSizeKindAndDevice) {
  host_memory_resource host;
  buffer<float> values(host, 1536, stream_ref{});
  EXPECT_EQ(fmt::format("{}", values), "buffer<float>: 1536 elements, 6 KiB of pageable memory");
  values.close();
  EXPECT_EQ(fmt::format("{}", values), "buffer<float>: closed");
  buffer<std::uint8_t> bytes(host, 10, stream_ref{});
  EXPECT_EQ(fmt::format("{}", bytes), "buffer<unsigned char>: 10 elements, 10 B of pageable memory");
}

TEST(Formatters, DeviceBuffersNameTheirDevice) {
  CUDAPMR_REQUIRE_GPU();
  const cudapmr::stream stream(0);
  buffer<double> values(default_device_resource(0), 1 << 20, stream);
  EXPECT_EQ(fmt::format("{}", values), "buffer<double>: 1048576 elements, 8 MiB of device memory on device 0");
  values.close();
  stream.synchronize();
}

TEST(Formatters, RefuseFormatSpecifications) {
  EXPECT_THROW(static_cast<void>(fmt::format(fmt::runtime("{:x}"), human_bytes(1))), fmt::format_error);
}

}  // namespace
}  // namespace cudapmr::test
