// SPDX-License-Identifier: Apache-2.0
// The C entry points that torch.cuda.memory.CUDAPluggableAllocator loads from
// this module's file: allocations of each device go to the cudapmr resource
// registered for it from Python (cudapmr.torch). They live in the module
// itself so that the registry is the one Python sets, with no second copy of
// the library in the process.
#include "bindings.hpp"

#include <array>
#include <atomic>
#include <cstdio>
#include <exception>
#include <mutex>
#include <string>
#include <unordered_map>

#include <nanobind/stl/string.h>

namespace nb = nanobind;
using namespace nb::literals;

namespace cudapmr::python {
namespace {

constexpr int max_devices = 64;

/// The resource of each device; null where none is registered.
std::array<std::atomic<stream_ordered_resource*>, max_devices> torch_resources{};

/// The resource each block came from: a block goes back there even after
/// another resource is registered for its device. Registered resources are
/// never destroyed, so the pointers stay valid.
std::mutex owners_mutex;
std::unordered_map<void*, stream_ordered_resource*> owners;

/// The message of the last refused allocation or free, for Python to show.
std::mutex last_error_mutex;
std::string last_error;

stream_ordered_resource* resource_of(int device) noexcept {
  if (device < 0 || device >= max_devices) return nullptr;
  return torch_resources[static_cast<std::size_t>(device)].load(std::memory_order_acquire);
}

void remember_failure(const std::string& message) noexcept {
  try {
    const std::lock_guard lock(last_error_mutex);
    last_error = message;
  } catch (...) {
  }
  std::fprintf(stderr, "cudapmr torch allocator: %s\n", message.c_str());
}

}  // namespace

void bind_torch_allocator(nb::module_& module) {
  module.def(
      "_torch_set_resource",
      [](int device, nb::handle resource_object) {
        if (device < 0 || device >= max_devices)
          throw nb::value_error(("device " + std::to_string(device) + " is outside 0.." +
                                 std::to_string(max_devices - 1))
                                    .c_str());
        stream_ordered_resource* resource =
            resource_object.is_none() ? nullptr : &nb::cast<stream_ordered_resource&>(resource_object);
        // PyTorch frees into the resource whenever it drops a tensor, down to the
        // last ones collected while the interpreter shuts down: a registered
        // resource is kept for the life of the process (one reference, never dropped).
        if (resource != nullptr) resource_object.inc_ref();
        torch_resources[static_cast<std::size_t>(device)].store(resource, std::memory_order_release);
      },
      "device_id"_a, "resource"_a.none());
  module.def("_torch_last_error", [] {
    const std::lock_guard lock(last_error_mutex);
    return last_error;
  });
}

}  // namespace cudapmr::python

/// Allocates `bytes` on `device` in stream order on `stream` from the
/// registered resource; null (with a message on stderr) when it refuses or
/// none is registered. Never throws.
extern "C" __attribute__((visibility("default"))) void* cudapmr_torch_malloc(std::size_t bytes, int device,
                                                                              cudaStream_t stream) {
  cudapmr::stream_ordered_resource* resource = cudapmr::python::resource_of(device);
  if (resource == nullptr) {
    cudapmr::python::remember_failure("no cudapmr resource is registered for device " + std::to_string(device) +
                                      " (cudapmr.torch.allocator(resource) registers one)");
    return nullptr;
  }
  void* pointer = nullptr;
  try {
    pointer = resource->allocate_async(bytes, stream);
    if (pointer != nullptr) {
      const std::lock_guard lock(cudapmr::python::owners_mutex);
      cudapmr::python::owners.emplace(pointer, resource);
    }
    return pointer;
  } catch (const std::exception& error) {
    if (pointer != nullptr) resource->deallocate_async(pointer, bytes, stream);  // its owner could not be recorded
    cudapmr::python::remember_failure(error.what());
  } catch (...) {
    cudapmr::python::remember_failure("unknown error allocating " + std::to_string(bytes) + " bytes");
  }
  return nullptr;
}

/// Frees in stream order on `stream`, into the resource that allocated it,
/// what cudapmr_torch_malloc gave; another pointer is left alone, with a
/// message on stderr. Never throws.
extern "C" __attribute__((visibility("default"))) void cudapmr_torch_free(void* pointer, std::size_t bytes,
                                                                           int device, cudaStream_t stream) {
  if (pointer == nullptr) return;
  cudapmr::stream_ordered_resource* resource = nullptr;
  {
    const std::lock_guard lock(cudapmr::python::owners_mutex);
    if (const auto found = cudapmr::python::owners.find(pointer); found != cudapmr::python::owners.end()) {
      resource = found->second;
      cudapmr::python::owners.erase(found);
    }
  }
  if (resource == nullptr) {
    try {
      cudapmr::python::remember_failure("cudapmr_torch_free: " + std::to_string(bytes) + " bytes at " +
                                        std::to_string(reinterpret_cast<std::uintptr_t>(pointer)) + " on device " +
                                        std::to_string(device) +
                                        " were not allocated by cudapmr_torch_malloc; not freed");
    } catch (...) {  // no memory for the message: the pointer is still left alone
    }
    return;
  }
  resource->deallocate_async(pointer, bytes, stream);
}
