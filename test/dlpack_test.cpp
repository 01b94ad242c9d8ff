// SPDX-License-Identifier: Apache-2.0
// dlpack.hpp: buffers handed over as DLPack tensors, and DLPack tensors viewed as spans.
#include "support/gpu.hpp"

#include <cudapmr/device_memory_resource.hpp>
#include <cudapmr/interop/dlpack.hpp>
#include <cudapmr/error.hpp>
#include <cudapmr/host_memory_resource.hpp>
#include <cudapmr/managed_memory_resource.hpp>
#include <cudapmr/pinned_memory_resource.hpp>

#include <gtest/gtest.h>

#include <array>
#include <complex>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace cudapmr::test {
namespace {

/// (code, bits, lanes), which gtest compares and prints.
std::tuple<int, int, int> fields(DLDataType dtype) { return {dtype.code, dtype.bits, dtype.lanes}; }

/// Runs `view` and expects std::invalid_argument whose message holds every one of `parts`.
template <class View>
void expect_refusal(View view, std::initializer_list<std::string> parts) {
  try {
    static_cast<void>(view());
    ADD_FAILURE() << "the view was accepted";
  } catch (const std::invalid_argument& error) {
    const std::string message = error.what();
    for (const std::string& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
  }
}

/// A tensor description made by hand, as another library would hand it over.
struct foreign_tensor {
  std::array<float, 20> values{};
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
  DLManagedTensor tensor{};

  foreign_tensor(std::vector<std::int64_t> extents, std::vector<std::int64_t> steps, DLDevice device = {kDLCPU, 0})
      : shape(std::move(extents)), strides(std::move(steps)) {
    std::iota(values.begin(), values.end(), 0.0f);
    tensor.dl_tensor.data = values.data();
    tensor.dl_tensor.device = device;
    tensor.dl_tensor.ndim = static_cast<int>(shape.size());
    tensor.dl_tensor.dtype = dlpack_dtype<float>;
    tensor.dl_tensor.shape = shape.data();
    tensor.dl_tensor.strides = strides.empty() ? nullptr : strides.data();
  }
};

TEST(Dlpack, DtypeFollowsTheElementType) {
  EXPECT_EQ(fields(dlpack_dtype<std::int8_t>), fields({kDLInt, 8, 1}));
  EXPECT_EQ(fields(dlpack_dtype<std::int64_t>), fields({kDLInt, 64, 1}));
  EXPECT_EQ(fields(dlpack_dtype<std::uint16_t>), fields({kDLUInt, 16, 1}));
  EXPECT_EQ(fields(dlpack_dtype<std::uint32_t>), fields({kDLUInt, 32, 1}));
  EXPECT_EQ(fields(dlpack_dtype<float>), fields({kDLFloat, 32, 1}));
  EXPECT_EQ(fields(dlpack_dtype<double>), fields({kDLFloat, 64, 1}));
  EXPECT_EQ(fields(dlpack_dtype<std::complex<float>>), fields({kDLComplex, 64, 1}));
  EXPECT_EQ(fields(dlpack_dtype<std::complex<double>>), fields({kDLComplex, 128, 1}));
  static_assert(!dlpack_element<bool> && !dlpack_element<long double> && !dlpack_element<char*>);
}

TEST(Dlpack, DeviceFollowsTheMemoryKind) {
  const std::array<std::pair<memory_kind, DLDeviceType>, 4> kinds{{{memory_kind::device, kDLCUDA},
                                                                   {memory_kind::pinned, kDLCUDAHost},
                                                                   {memory_kind::managed, kDLCUDAManaged},
                                                                   {memory_kind::pageable, kDLCPU}}};
  for (const auto& [kind, type] : kinds) {
    const DLDevice device = dlpack_device(kind, 3);
    EXPECT_EQ(device.device_type, type) << to_string(kind);
    EXPECT_EQ(device.device_id, kind == memory_kind::device ? 3 : 0) << to_string(kind);
    EXPECT_EQ(dlpack_memory_kind(device), kind);
  }
  expect_refusal([] { return dlpack_memory_kind({kDLOpenCL, 1}); }, {"device type 4", "kDLCUDAManaged (13)"});
}

TEST(Dlpack, HostBufferRoundTripsAndTheDeleterFreesIt) {
  host_memory_resource host;
  buffer<double> values(host, 1000, stream_ref{});
  const std::span<double> elements = values.span();
  std::iota(elements.begin(), elements.end(), 0.5);
  double* const data = values.data();

  DLManagedTensor* tensor = to_dlpack(std::move(values));
  EXPECT_FALSE(values.is_open());  // NOLINT(bugprone-use-after-move): the tensor owns it now
  ASSERT_NE(tensor, nullptr);
  const DLTensor& described = tensor->dl_tensor;
  EXPECT_EQ(described.data, data);
  EXPECT_EQ(described.device.device_type, kDLCPU);
  EXPECT_EQ(described.device.device_id, 0);
  EXPECT_EQ(described.ndim, 1);
  EXPECT_EQ(described.shape[0], 1000);
  EXPECT_EQ(described.strides, nullptr);
  EXPECT_EQ(described.byte_offset, 0u);
  EXPECT_EQ(fields(described.dtype), fields(dlpack_dtype<double>));

  const std::span<const double> view = view_dlpack<const double>(*tensor, memory_kind::pageable);
  EXPECT_EQ(view.data(), data);
  ASSERT_EQ(view.size(), 1000u);
  for (std::size_t i = 0; i < view.size(); ++i) ASSERT_EQ(view[i], 0.5 + static_cast<double>(i)) << i;

  EXPECT_EQ(host.used_bytes(), 8000u);
  tensor->deleter(tensor);
  EXPECT_EQ(host.used_bytes(), 0u);
}

TEST(Dlpack, ClosedBufferIsRefused) {
  host_memory_resource host;
  buffer<int> closed(host, 10, stream_ref{});
  closed.close();
  expect_refusal([&] { return to_dlpack(std::move(closed)); }, {"to_dlpack", "closed or moved-from"});
}

TEST(Dlpack, EmptyBufferRoundTrips) {
  host_memory_resource host;
  DLManagedTensor* tensor = to_dlpack(buffer<float>(host, 0, stream_ref{}));
  EXPECT_EQ(tensor->dl_tensor.shape[0], 0);
  EXPECT_TRUE(view_dlpack<float>(*tensor).empty());
  tensor->deleter(tensor);
}

TEST(Dlpack, ViewRefusesAnotherDtype) {
  foreign_tensor floats({20}, {});
  expect_refusal([&] { return view_dlpack<double>(floats.tensor); }, {"float32", "float64"});
  expect_refusal([&] { return view_dlpack<std::int32_t>(floats.tensor); }, {"float32", "int32"});
  floats.tensor.dl_tensor.dtype.lanes = 4;
  expect_refusal([&] { return view_dlpack<float>(floats.tensor); }, {"4 lanes"});
}

TEST(Dlpack, ViewRefusesAnUnknownDeviceOrAnotherKind) {
  foreign_tensor on_rocm({20}, {}, {kDLROCM, 1});
  expect_refusal([&] { return view_dlpack<float>(on_rocm.tensor); }, {"device type 10", "device id 1"});
  foreign_tensor on_cpu({20}, {});
  expect_refusal([&] { return view_dlpack<float>(on_cpu.tensor, memory_kind::device); },
                 {"pageable memory", "kDLCPU", "device memory is required"});
}

TEST(Dlpack, ViewTakesAnyCompactRowMajorTensor) {
  foreign_tensor matrix({4, 5}, {5, 1});
  const std::span<float> flat = view_dlpack<float>(matrix.tensor);
  EXPECT_EQ(flat.data(), matrix.values.data());
  EXPECT_EQ(flat.size(), 20u);
  foreign_tensor unit_rows({1, 20}, {999, 1});  // a dimension of extent 1 is never stepped
  EXPECT_EQ(view_dlpack<float>(unit_rows.tensor).size(), 20u);
  foreign_tensor scalar({}, {});
  EXPECT_EQ(view_dlpack<float>(scalar.tensor).size(), 1u);
  foreign_tensor offset({3}, {});
  offset.tensor.dl_tensor.byte_offset = 2 * sizeof(float);
  const std::span<float> tail = view_dlpack<float>(offset.tensor);
  EXPECT_EQ(tail.data(), offset.values.data() + 2);
  EXPECT_EQ(tail[0], 2.0f);
}

TEST(Dlpack, ViewRefusesStridedMisalignedOrMalformedTensors) {
  foreign_tensor column_major({4, 5}, {1, 4});
  expect_refusal([&] { return view_dlpack<float>(column_major.tensor); }, {"shape [4, 5]", "strides [1, 4]", "[5, 1]"});
  foreign_tensor every_other({10}, {2});
  expect_refusal([&] { return view_dlpack<float>(every_other.tensor); }, {"strides [2]"});
  foreign_tensor misaligned({4}, {});
  misaligned.tensor.dl_tensor.byte_offset = 2;
  expect_refusal([&] { return view_dlpack<float>(misaligned.tensor); }, {"byte_offset 2", "aligned to 4"});
  foreign_tensor negative({-3}, {});
  expect_refusal([&] { return view_dlpack<float>(negative.tensor); }, {"shape [-3]", "negative"});
  foreign_tensor no_data({5}, {});
  no_data.tensor.dl_tensor.data = nullptr;
  expect_refusal([&] { return view_dlpack<float>(no_data.tensor); }, {"no data"});
}

/// Hands a buffer of `pool`'s kind over to DLPack, views it back, and checks
/// that the deleter returns the memory to the pool.
void expect_round_trip(pool_resource& pool, DLDeviceType expected_type, int expected_id) {
  const cudapmr::stream stream(0);
  std::vector<std::uint32_t> input(65536);
  std::iota(input.begin(), input.end(), 7u);
  buffer<std::uint32_t> values(pool, input.size(), stream);
  values.copy_from(std::span<const std::uint32_t>(input), stream);
  stream.synchronize();
  std::uint32_t* const data = values.data();

  DLManagedTensor* tensor = to_dlpack(std::move(values));
  EXPECT_EQ(tensor->dl_tensor.device.device_type, expected_type);
  EXPECT_EQ(tensor->dl_tensor.device.device_id, expected_id);
  EXPECT_EQ(fields(tensor->dl_tensor.dtype), fields(dlpack_dtype<std::uint32_t>));
  const std::span<std::uint32_t> view = view_dlpack<std::uint32_t>(*tensor, pool.kind());
  EXPECT_EQ(view.data(), data);
  ASSERT_EQ(view.size(), input.size());
  std::vector<std::uint32_t> output(input.size());
  CUDAPMR_CHECK(cudaMemcpy(output.data(), view.data(), view.size_bytes(), cudaMemcpyDefault));
  EXPECT_EQ(output, input);

  EXPECT_GE(pool.stats().used_current, input.size() * sizeof(std::uint32_t));
  tensor->deleter(tensor);
  stream.synchronize();  // the deleter frees on the buffer's stream
  EXPECT_EQ(pool.stats().used_current, 0u) << "the deleter did not free the buffer of " << pool.description();
}

TEST(Dlpack, DeviceBufferRoundTripsAsCudaMemoryOfItsDevice) {
  CUDAPMR_REQUIRE_GPU();
  device_memory_resource pool(0, device_pool_options{});
  expect_round_trip(pool, kDLCUDA, 0);
}

TEST(Dlpack, PinnedBufferRoundTripsAsCudaHostMemory) {
  CUDAPMR_REQUIRE_GPU();
  pinned_memory_resource pool(pinned_pool_options{});
  expect_round_trip(pool, kDLCUDAHost, 0);
}

TEST(Dlpack, ManagedBufferRoundTripsAsCudaManagedMemory) {
  CUDAPMR_REQUIRE_GPU();
  managed_memory_resource pool(managed_pool_options{.preferred_device = 0});
  expect_round_trip(pool, kDLCUDAManaged, 0);
}

}  // namespace
}  // namespace cudapmr::test
