// SPDX-License-Identifier: Apache-2.0
// logging_adaptor: one CSV line per event, in order, to a stream or a file.
#include "support/resource_contract.hpp"
#include "adaptors/gpu_upstreams.hpp"
#include "support/resource_cases.hpp"

#include <cudapmr/adaptors/logging_adaptor.hpp>
#include <cudapmr/detail/thread_ordinal.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace cudapmr::test {
namespace {

cudaStream_t fake_stream(std::uintptr_t id) { return reinterpret_cast<cudaStream_t>(id * 0x1000); }

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, separator)) parts.push_back(part);
  return parts;
}

std::string hex(const void* p) { return fmt::format("{:#x}", reinterpret_cast<std::uintptr_t>(p)); }

TEST(LoggingAdaptor, WritesTheHeaderThenOneLinePerEvent) {
  host_memory_resource upstream;
  std::ostringstream sink;
  {
    logging_adaptor logged(upstream, sink);
    void* p = logged.allocate_async(1000, 512, fake_stream(5));
    logged.deallocate_async(p, 1000, 512, fake_stream(5));
    EXPECT_EQ(logged.allocate_async(0, stream_ref{}), nullptr);  // not an event
  }
  const std::vector<std::string> lines = split(sink.str(), '\n');
  ASSERT_EQ(lines.size(), 3u) << sink.str();
  EXPECT_EQ(lines[0], logging_adaptor::csv_header);
  const std::vector<std::string> allocate = split(lines[1], ',');
  const std::vector<std::string> deallocate = split(lines[2], ',');
  ASSERT_EQ(allocate.size(), 9u) << lines[1];
  ASSERT_EQ(deallocate.size(), 9u) << lines[2];
  EXPECT_EQ(allocate[0], "1");
  EXPECT_EQ(deallocate[0], "2");
  EXPECT_LE(std::stoull(allocate[1]), std::stoull(deallocate[1])) << "time never runs backwards";
  EXPECT_EQ(allocate[2], std::to_string(detail::thread_ordinal()));
  EXPECT_EQ(allocate[3], "allocate");
  EXPECT_EQ(deallocate[3], "deallocate");
  EXPECT_EQ(allocate[4], deallocate[4]);
  EXPECT_EQ(allocate[4].substr(0, 2), "0x");
  EXPECT_EQ(allocate[5], "1000");
  EXPECT_EQ(allocate[6], "512");
  EXPECT_EQ(allocate[7], hex(fake_stream(5)));
  EXPECT_EQ(allocate[8], "pageable");
}

TEST(LoggingAdaptor, LogsRefusedAllocations) {
  host_memory_resource upstream(100);
  std::ostringstream sink;
  logging_adaptor logged(upstream, sink);
  EXPECT_THROW(static_cast<void>(logged.allocate_async(200, stream_ref{})), out_of_memory);
  logged.flush();
  const std::vector<std::string> lines = split(sink.str(), '\n');
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(split(lines[1], ',')[3], "allocate_failed");
  EXPECT_EQ(split(lines[1], ',')[4], "0x0");
  EXPECT_EQ(split(lines[1], ',')[5], "200");
}

TEST(LoggingAdaptor, BuffersUntilFlushedOrFull) {
  host_memory_resource upstream;
  std::ostringstream sink;
  logging_adaptor logged(upstream, sink, {.buffer_bytes = 4096});
  void* p = logged.allocate(64);
  EXPECT_TRUE(sink.str().empty()) << "written before the buffer filled";
  logged.flush();
  EXPECT_EQ(split(sink.str(), '\n').size(), 2u);
  for (int i = 0; i < 200; ++i) logged.deallocate(logged.allocate(64), 64);  // ~20 KiB of lines
  EXPECT_GT(split(sink.str(), '\n').size(), 100u) << "a full buffer is written without a flush";
  logged.deallocate(p, 64);
}

TEST(LoggingAdaptor, SequencesOrderEventsAcrossThreads) {
  host_memory_resource upstream;
  std::ostringstream sink;
  {
    logging_adaptor logged(upstream, sink);
    std::vector<std::thread> workers;
    for (int index = 0; index < 8; ++index) {
      workers.emplace_back([&logged] {
        for (int i = 0; i < 300; ++i) logged.deallocate_async(logged.allocate_async(128, stream_ref{}), 128, stream_ref{});
      });
    }
    for (std::thread& worker : workers) worker.join();
  }
  const std::vector<std::string> lines = split(sink.str(), '\n');
  ASSERT_EQ(lines.size(), 1u + 8u * 300u * 2u);
  std::vector<std::string> threads;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> fields = split(lines[i], ',');
    ASSERT_EQ(fields[0], std::to_string(i)) << "lines are written in sequence order";
    threads.push_back(fields[2]);
  }
  std::sort(threads.begin(), threads.end());
  EXPECT_EQ(std::unique(threads.begin(), threads.end()) - threads.begin(), 8) << "one thread number per thread";
}

TEST(LoggingAdaptor, WritesToAFile) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     fmt::format("cudapmr-logging-test-{}.csv", ::getpid());
  host_memory_resource upstream;
  {
    logging_adaptor logged(upstream, path);
    EXPECT_NE(logged.description().find(path.string()), std::string::npos) << logged.description();
    logged.deallocate(logged.allocate(4096), 4096);
  }
  std::ifstream file(path);
  std::string header, first, second;
  std::getline(file, header);
  std::getline(file, first);
  std::getline(file, second);
  EXPECT_EQ(header, logging_adaptor::csv_header);
  EXPECT_EQ(split(first, ',')[3], "allocate");
  EXPECT_EQ(split(second, ',')[3], "deallocate");
  std::filesystem::remove(path);
}

TEST(LoggingAdaptor, AFileThatCannotBeOpenedThrowsNamingThePath) {
  host_memory_resource upstream;
  const std::filesystem::path path = "/nonexistent-directory-for-cudapmr/log.csv";
  try {
    logging_adaptor logged(upstream, path);
    ADD_FAILURE() << "a log was opened at " << path;
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find(path.string()), std::string::npos) << error.what();
  }
}

TEST(LoggingAdaptor, LogsTheMemoryKindOfTheGpuKinds) {
  CUDAPMR_REQUIRE_GPU();
  const cudapmr::stream stream(0);
  gpu_upstreams upstreams;
  for (stream_ordered_resource* upstream : upstreams.all()) {
    std::ostringstream sink;
    {
      logging_adaptor logged(*upstream, sink);
      logged.deallocate_async(logged.allocate_async(mebibyte, stream), mebibyte, stream);
    }
    stream.synchronize();
    const std::vector<std::string> lines = split(sink.str(), '\n');
    ASSERT_EQ(lines.size(), 3u);
    EXPECT_EQ(split(lines[1], ',')[8], std::string(to_string(upstream->kind())));
    EXPECT_EQ(split(lines[1], ',')[7], hex(stream.get()));
  }
}

// The shared contract, over the host resource and each kind's owned pool.
using logging_adaptor_cases = adaptor_over_each_kind<logging_maker>;
using logging_adaptor_exhaustible_cases = adaptor_over_exhaustible_kinds<logging_maker>;
CUDAPMR_INSTANTIATE_RESOURCE_CONTRACT(LoggingAdaptor, logging_adaptor_cases, logging_adaptor_exhaustible_cases);

}  // namespace
}  // namespace cudapmr::test
