// SPDX-License-Identifier: Apache-2.0
// A C ABI, for Python's ctypes, that hands cudapmr buffers out as DLPack
// tensors: cudapmr_capsule.py wraps each in a "dltensor" PyCapsule that
// torch.from_dlpack and cupy.from_dlpack take without copying.
//
// Functions that can fail return null or -1 and leave a message for
// cudapmr_capsule_last_error(); none lets an exception cross into C.
#include <cudapmr/device_memory_resource.hpp>
#include <cudapmr/interop/dlpack.hpp>
#include <cudapmr/error.hpp>
#include <cudapmr/host_memory_resource.hpp>
#include <cudapmr/managed_memory_resource.hpp>
#include <cudapmr/pinned_memory_resource.hpp>
#include <cudapmr/stream.hpp>

#include <cstdint>
#include <exception>
#include <numeric>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#define CUDAPMR_CAPSULE_API extern "C" __attribute__((visibility("default")))

namespace {

thread_local std::string last_error;

/// Runs `work`; on an exception, keeps its message and returns `failed`.
template <class Work, class Result>
Result guarded(Work&& work, Result failed) noexcept {
  try {
    last_error.clear();
    return work();
  } catch (const std::exception& error) {
    last_error = error.what();
  } catch (...) {
    last_error = "unknown exception";
  }
  return failed;
}

/// The memory of one kind: an owned pool for the CUDA kinds, so that the
/// bytes in use are the capsules' alone. Never destroyed: a consumer may free
/// its tensor while Python shuts down.
cudapmr::stream_ordered_resource& memory_of(std::string_view kind) {
  if (kind == "device") {
    static auto* pool = new cudapmr::device_memory_resource(0, cudapmr::device_pool_options{});
    return *pool;
  }
  if (kind == "pinned") {
    static auto* pool = new cudapmr::pinned_memory_resource(cudapmr::pinned_pool_options{});
    return *pool;
  }
  if (kind == "managed") {
    static auto* pool = new cudapmr::managed_memory_resource(cudapmr::managed_pool_options{.preferred_device = 0});
    return *pool;
  }
  if (kind == "pageable") {  // needs no GPU: the hand-over itself can be checked anywhere
    static auto* host = new cudapmr::host_memory_resource();
    return *host;
  }
  throw std::invalid_argument("memory kind \"" + std::string(kind) + "\" is none of device, pinned, managed, pageable");
}

/// The stream the buffers of `memory` are allocated, copied and freed on;
/// the null stream for pageable memory, which involves no stream.
cudapmr::stream_ref stream_for(const cudapmr::stream_ordered_resource& memory) {
  if (memory.kind() == cudapmr::memory_kind::pageable) return {};
  static const auto* stream = new cudapmr::stream(0);
  return *stream;
}

/// Waits for the stream of `memory`'s buffers; pageable memory has none to wait for.
void synchronize(const cudapmr::stream_ordered_resource& memory) {
  if (memory.kind() != cudapmr::memory_kind::pageable) CUDAPMR_CHECK(cudaStreamSynchronize(stream_for(memory).get()));
}

/// Copies one float between cudapmr's view of a tensor and the caller, and
/// waits until it has landed.
void copy_float(float* destination, const float* source, const DLManagedTensor* tensor) {
  if (cudapmr::dlpack_memory_kind(tensor->dl_tensor.device) == cudapmr::memory_kind::pageable) {
    *destination = *source;
    return;
  }
  CUDAPMR_CHECK(cudaMemcpy(destination, source, sizeof(float), cudaMemcpyDefault));
  // From pageable memory cudaMemcpy returns once the value is staged, before
  // the DMA lands: a consumer reading on the host (NumPy on managed memory)
  // would see the old value.
  CUDAPMR_CHECK(cudaDeviceSynchronize());
}

/// The address of element `index` of a float tensor. \throws std::out_of_range past its end.
float* element(const DLManagedTensor* tensor, std::int64_t index) {
  const std::span<float> values = cudapmr::view_dlpack<float>(*tensor);
  if (index < 0 || static_cast<std::size_t>(index) >= values.size())
    throw std::out_of_range("index " + std::to_string(index) + " is outside the " + std::to_string(values.size()) +
                            " elements");
  return values.data() + index;
}

}  // namespace

/// A 1-D float tensor of `count` values 0, 1, 2, ... in a buffer of `kind`
/// ("device", "pinned", "managed" or "pageable"), ready on every stream; null on failure.
CUDAPMR_CAPSULE_API DLManagedTensor* cudapmr_capsule_make_sequence(const char* kind, std::int64_t count) {
  return guarded(
      [&] {
        if (count < 0) throw std::invalid_argument("count " + std::to_string(count) + " is negative");
        std::vector<float> values(static_cast<std::size_t>(count));
        std::iota(values.begin(), values.end(), 0.0f);
        cudapmr::stream_ordered_resource& memory = memory_of(kind);
        cudapmr::buffer<float> buffer(memory, values.size(), stream_for(memory));
        buffer.copy_from(std::span<const float>(values), buffer.stream());
        synchronize(memory);  // `values` goes away, and the consumer may read on any stream
        return cudapmr::to_dlpack(std::move(buffer));
      },
      static_cast<DLManagedTensor*>(nullptr));
}

/// The address of the tensor's first element.
CUDAPMR_CAPSULE_API void* cudapmr_capsule_data(const DLManagedTensor* tensor) { return tensor->dl_tensor.data; }
/// The tensor's DLPack device type and id, as `__dlpack_device__` reports them.
CUDAPMR_CAPSULE_API int cudapmr_capsule_device_type(const DLManagedTensor* tensor) {
  return static_cast<int>(tensor->dl_tensor.device.device_type);
}
CUDAPMR_CAPSULE_API int cudapmr_capsule_device_id(const DLManagedTensor* tensor) {
  return tensor->dl_tensor.device.device_id;
}

/// Reads element `index` through cudapmr's typed view; 0 on success, -1 on failure.
CUDAPMR_CAPSULE_API int cudapmr_capsule_read(const DLManagedTensor* tensor, std::int64_t index, float* value) {
  return guarded(
      [&] {
        copy_float(value, element(tensor, index), tensor);
        return 0;
      },
      -1);
}

/// Writes element `index` through cudapmr's typed view, and waits for it; 0 on success, -1 on failure.
CUDAPMR_CAPSULE_API int cudapmr_capsule_write(const DLManagedTensor* tensor, std::int64_t index, float value) {
  return guarded(
      [&] {
        copy_float(element(tensor, index), &value, tensor);
        return 0;
      },
      -1);
}

/// Bytes that the memory of `kind` has handed out and not got back once its
/// stream is done; -1 on failure.
CUDAPMR_CAPSULE_API std::int64_t cudapmr_capsule_bytes_in_use(const char* kind) {
  return guarded(
      [&] {
        cudapmr::stream_ordered_resource& memory = memory_of(kind);
        synchronize(memory);
        if (const auto* host = dynamic_cast<const cudapmr::host_memory_resource*>(&memory))
          return static_cast<std::int64_t>(host->used_bytes());
        return static_cast<std::int64_t>(dynamic_cast<const cudapmr::pool_resource&>(memory).stats().used_current);
      },
      std::int64_t{-1});
}

/// Calls the tensor's deleter: for a tensor that was never handed to a consumer.
CUDAPMR_CAPSULE_API void cudapmr_capsule_delete(DLManagedTensor* tensor) {
  if (tensor != nullptr && tensor->deleter != nullptr) tensor->deleter(tensor);
}

/// The message of the last failure on this thread; empty after a success.
CUDAPMR_CAPSULE_API const char* cudapmr_capsule_last_error() { return last_error.c_str(); }
