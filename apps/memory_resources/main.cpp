// SPDX-License-Identifier: Apache-2.0
// memory_resources: the C++ counterpart of cuda.core's memoryResources sample.
// Runs scale_and_bias over device, pinned and managed memory and checks every element.
#include "command_line.hpp"
#include "scale_and_bias.hpp"
#include "snapshot_files.hpp"
#include "usage_report.hpp"

#include <cudapmr/cudapmr.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr int exit_passed = 0;
constexpr int exit_check_failed = 1;
constexpr int exit_unusable = 2;

struct options {
  std::size_t elements = 65536;
  int device = 0;
  bool report = false;
  cudapmr::apps::snapshot_files files;
};

using cudapmr::apps::usage_error;

/// A result that differs from the expected value.
struct check_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The options, or exit status 2 and one line for an unusable argument.
options parse_arguments(int argc, char** argv) {
  options parsed;
  CLI::App app(
      "Runs scale_and_bias over buffers from cudapmr's device, pinned and managed memory resources and checks every "
      "result on the host.\nExit status: 0 all checks passed, 1 a check failed, 2 unusable arguments or no usable "
      "device.",
      "memory_resources");
  cudapmr::apps::add_version(app);
  app.add_option_function<std::string>(
      "--elements",
      [&](const std::string& text) {
        parsed.elements = cudapmr::apps::parse_integer<std::size_t>("--elements", text);
        if (parsed.elements == 0) throw usage_error("--elements 0: need at least one element");
      },
      "number of floats per buffer (default 65536, at least 1)")
      ->type_name("N");
  app.add_option_function<std::string>(
      "--device",
      [&](const std::string& text) {
        parsed.device = cudapmr::apps::parse_integer<int>("--device", text);
        if (parsed.device < 0) throw usage_error(fmt::format("--device {}: a device ordinal is never negative", text));
      },
      "CUDA device ordinal (default 0)")
      ->type_name("D");
  app.add_flag("--report", parsed.report,
               "after the sections, print each resource's peak and current usage and its pool's reserve");
  cudapmr::apps::add_snapshot_options(app, parsed.files, "after the sections");
  cudapmr::apps::parse_or_exit(app, argc, argv);
  return parsed;
}

/// Input values that scale_and_bias maps to exactly representable results, so
/// results are compared for equality.
float input_value(std::size_t i) { return static_cast<float>(static_cast<int>(i % 4096) - 2048) * 0.25f; }

void fill_input(std::span<float> values) {
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = input_value(i);
}

void verify(std::string_view section, std::span<const float> results, float scale, float bias) {
  for (std::size_t i = 0; i < results.size(); ++i) {
    const float expected = input_value(i) * scale + bias;
    if (results[i] != expected)
      throw check_failure(fmt::format("section {}: index {}: expected {}, got {}", section, i, expected, results[i]));
  }
}

/// Managed memory beyond what the GPU has free oversubscribes the device, which
/// can stall it; such a request is refused like any other exhaustion.
void require_free_device_memory(const cudapmr::device& gpu, std::size_t bytes, std::string_view what) {
  if (const std::size_t free_bytes = gpu.free_memory(); bytes > free_bytes)
    throw cudapmr::out_of_memory(bytes, cudapmr::default_alignment, std::string(what),
                                 fmt::format("device {} has only {} bytes free", gpu.ordinal(), free_bytes));
}

// [1] Pinned staging in, kernel on device memory, pinned staging out.
void device_with_pinned_staging(const cudapmr::device& gpu, std::size_t elements, demo::usage_report& report) {
  fmt::print("[1] DeviceMemoryResource + PinnedMemoryResource (staging)\n");
  const cudapmr::stream stream(gpu.ordinal());
  cudapmr::pinned_memory_resource pinned;
  demo::usage_report::watch pinned_usage(report, "[1] pinned staging (default pool)", pinned);

  // Device memory first, from the current device resource (the default pool):
  // a request larger than the GPU fails there at once.
  cudapmr::buffer<float> on_device(elements, stream);
  cudapmr::buffer<float> staging_in(pinned_usage.resource(), elements, stream);
  cudapmr::buffer<float> staging_out(pinned_usage.resource(), elements, stream);
  stream.synchronize();  // the pinned memory is now ready for the host
  fill_input(staging_in.span());

  on_device.copy_from(staging_in, stream);
  demo::scale_and_bias(on_device.data(), on_device.size(), 3.0f, -0.5f, stream);
  on_device.copy_to(staging_out, stream);
  stream.synchronize();
  verify("[1]", staging_out.span(), 3.0f, -0.5f);
  fmt::print("  Pinned staging, device kernel, and copy_to verified\n\n");
}

// [2] Managed memory written and read by the host, with no explicit copy.
void managed_memory(const cudapmr::device& gpu, std::size_t elements, demo::usage_report& report) {
  fmt::print("[2] ManagedMemoryResource (unified memory)\n");
  const cudapmr::stream stream(gpu.ordinal());
  cudapmr::managed_memory_resource managed;
  require_free_device_memory(gpu, cudapmr::detail::checked_byte_count(elements, sizeof(float)),
                             managed.description());

  demo::usage_report::watch managed_usage(report, "[2] managed (default pool)", managed);
  cudapmr::buffer<float> unified(managed_usage.resource(), elements, stream);
  stream.synchronize();
  fill_input(unified.span());
  // Host stores into pooled managed memory are invisible to compute-sanitizer's initcheck.
  cudapmr::mark_initialized(unified.span(), stream);
  // Pages move in one prefetch each way, not one fault at a time (where the
  // device can prefetch: concurrent managed access).
  const bool prefetch = gpu.attribute(cudaDevAttrConcurrentManagedAccess) != 0;
  if (prefetch) unified.prefetch_to_device(gpu.ordinal(), stream);
  demo::scale_and_bias(unified.data(), unified.size(), 0.5f, 10.0f, stream);
  if (prefetch) unified.prefetch_to_host(stream);
  stream.synchronize();
  verify("[2]", unified.span(), 0.5f, 10.0f);
  fmt::print("  GPU writes observed directly through the host-visible mapping\n\n");
}

// [3] A device pool the program creates and owns.
void explicit_device_pool(const cudapmr::device& gpu, std::size_t elements, demo::usage_report& report) {
  fmt::print("[3] Explicit DeviceMemoryResource\n");
  const cudapmr::stream stream(gpu.ordinal());
  const std::size_t bytes = cudapmr::detail::checked_byte_count(elements, sizeof(float));
  cudapmr::device_memory_resource owned_pool(gpu.ordinal(), cudapmr::device_pool_options{.initial_size = bytes});

  std::vector<float> host(elements);
  fill_input(host);
  demo::usage_report::watch owned_usage(report, "[3] device (owned pool)", owned_pool);
  cudapmr::buffer<float> on_device(owned_usage.resource(), elements, stream);
  on_device.copy_from(std::span<const float>(host), stream);
  demo::scale_and_bias(on_device.data(), on_device.size(), 1.0f, 100.0f, stream);
  on_device.copy_to(std::span<float>(host), stream);
  stream.synchronize();
  on_device.close(stream);
  verify("[3]", host, 1.0f, 100.0f);
  fmt::print("  Explicit DeviceMemoryResource allocation verified\n\n");
}

int run(const options& chosen) {
  if (cudapmr::device::count() == 0) throw usage_error("no CUDA device was found");
  const cudapmr::device gpu(chosen.device);
  gpu.set_current();
  const auto [major, minor] = gpu.compute_capability();
  fmt::print("Device: {}\nCompute Capability: {}.{}\n\n", gpu.name(), major, minor);

  demo::usage_report report;
  {
    // Buffers that name no resource draw from the current device resource:
    // here the default stack, counted for the report.
    demo::usage_report::watch device_usage(report, fmt::format("[1] device (default stack, device {})", gpu.ordinal()),
                                           cudapmr::default_device_stack(gpu.ordinal()));
    const cudapmr::scoped_current_device_resource current(gpu.ordinal(), device_usage.resource());
    {
      const cudapmr::scoped_annotation section(device_usage.history(), "[1] device with pinned staging");
      device_with_pinned_staging(gpu, chosen.elements, report);
    }
    {
      const cudapmr::scoped_annotation section(device_usage.history(), "[2] managed memory");
      managed_memory(gpu, chosen.elements, report);
    }
    const cudapmr::scoped_annotation section(device_usage.history(), "[3] explicit device pool");
    explicit_device_pool(gpu, chosen.elements, report);
  }
  fmt::print("All memory resource demos passed.\n");
  if (chosen.report) report.print();
  if (chosen.files.any()) cudapmr::apps::write_snapshot_files(chosen.files, report.snapshots());
  return exit_passed;
}

void report(const char* kind, const char* message) {
  std::fflush(stdout);
  fmt::print(stderr, "memory_resources: {}{}\n", kind, message);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_arguments(argc, argv));
  } catch (const usage_error& error) {
    report("", error.what());
    return exit_unusable;
  } catch (const std::invalid_argument& error) {
    report("", error.what());
    return exit_unusable;
  } catch (const cudapmr::out_of_memory& error) {
    report("", error.what());
    return exit_unusable;
  } catch (const cudapmr::cuda_error& error) {
    report("", error.what());
    return cudapmr::is_no_device_error(error.error()) ? exit_unusable : exit_check_failed;
  } catch (const check_failure& error) {
    report("check failed: ", error.what());
    return exit_check_failed;
  } catch (const std::exception& error) {
    report("error: ", error.what());
    return exit_check_failed;
  }
}
