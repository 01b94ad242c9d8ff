// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/multiprocess/ipc.hpp"

#include "cudapmr/detail/cuda_check.hpp"
#include "cudapmr/detail/driver_entry_point.hpp"
#include "cudapmr/detail/virtual_memory_driver.hpp"
#include "cudapmr/device.hpp"
#include "cudapmr/error.hpp"

#include <cuda.h>
#include <fmt/format.h>

#include <cstdint>
#include <stdexcept>
#include <utility>

namespace cudapmr {
namespace {

/// Marks cudapmr's protocol messages, so that a stray message is refused by name.
constexpr std::uint32_t protocol_tag = 0x524d5043;  // "CPMR"
enum class message_kind : std::uint32_t { shared_memory = 1, released = 2, virtual_memory = 3 };

struct message_header {
  std::uint32_t tag;
  message_kind kind;
};

struct shared_memory_message {
  message_header header{protocol_tag, message_kind::shared_memory};
  ipc_memory_handle memory;
};

struct virtual_memory_message {
  message_header header{protocol_tag, message_kind::virtual_memory};
  std::uint64_t bytes;
};

struct released_message {
  message_header header{protocol_tag, message_kind::released};
};

void check_header(const message_header& header, message_kind expected, const char* step) {
  if (header.tag != protocol_tag || header.kind != expected)
    throw std::runtime_error(fmt::format("{}: the message is not the expected cudapmr message (tag {:#x}, kind {}, expected {})",
                                         step, header.tag, static_cast<std::uint32_t>(header.kind),
                                         static_cast<std::uint32_t>(expected)));
}

/// The allocation that holds `p`: its first byte and its size, as the driver
/// knows them, never what a message says. Pointer attributes, unlike
/// cuMemGetAddressRange, need no current context: a process that has only
/// imported a pool may have none on this thread yet.
struct allocation_range {
  std::uintptr_t base;
  std::size_t bytes;
};

allocation_range allocation_holding(const void* p, const char* step) {
  using pointer_attribute_function = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);
  static const auto attribute = detail::driver_function<pointer_attribute_function>("cuPointerGetAttribute");
  if (attribute == nullptr)
    throw std::runtime_error(fmt::format("{}: the driver gives no cuPointerGetAttribute to check the memory with", step));
  CUdeviceptr base = 0;
  std::size_t bytes = 0;
  const auto address = reinterpret_cast<CUdeviceptr>(p);
  CUresult status = attribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, address);
  if (status == CUDA_SUCCESS) status = attribute(&bytes, CU_POINTER_ATTRIBUTE_RANGE_SIZE, address);
  if (status != CUDA_SUCCESS)
    throw std::invalid_argument(fmt::format("{}: {} is not in a CUDA allocation (cuPointerGetAttribute answered {})",
                                            step, fmt::ptr(p), static_cast<int>(status)));
  return {static_cast<std::uintptr_t>(base), bytes};
}

/// Throws `Error` where `bytes` from `p` pass the end of the allocation that holds `p`.
template <class Error>
void require_within_allocation(const void* p, std::size_t bytes, const char* step, const char* whose_bytes) {
  const allocation_range range = allocation_holding(p, step);
  const std::size_t offset = reinterpret_cast<std::uintptr_t>(p) - range.base;
  if (bytes > range.bytes - offset)
    throw Error(fmt::format("{}: {} {} bytes at {}, but its allocation holds {} bytes from there ({} bytes from {:#x})",
                            step, whose_bytes, bytes, fmt::ptr(p), range.bytes - offset, range.bytes, range.base));
}

}  // namespace

file_descriptor export_pool(const pool_resource& resource) {
  int descriptor = -1;
  detail::check_cuda(
      cudaMemPoolExportToShareableHandle(&descriptor, resource.pool(), cudaMemHandleTypePosixFileDescriptor, 0), [&] {
        return fmt::format("cudaMemPoolExportToShareableHandle of {}: only a pool made with "
                           "device_pool_options{{.ipc_enabled = true}} can be shared",
                           resource.description());
      });
  return file_descriptor(descriptor);
}

ipc_memory_handle export_memory(const void* p, std::size_t bytes) {
  if (p == nullptr) throw std::invalid_argument(fmt::format("export_memory: null pointer ({} bytes)", bytes));
  require_within_allocation<std::invalid_argument>(p, bytes, "export_memory", "asked to export");
  ipc_memory_handle handle{.bytes = bytes};
  detail::check_cuda(cudaMemPoolExportPointer(&handle.export_data, const_cast<void*>(p)), [&] {
    return fmt::format("cudaMemPoolExportPointer of {} ({} bytes): the memory must come from an IPC-enabled pool "
                       "exported first with export_pool",
                       fmt::ptr(p), bytes);
  });
  return handle;
}

// ---- imported_pool -----------------------------------------------------------

imported_pool::imported_pool(file_descriptor descriptor) {
  if (!descriptor.is_open())
    throw std::invalid_argument("imported_pool: the pool's file descriptor is closed; a pool is imported only through "
                                "the descriptor its exporter sent");
  // A POSIX descriptor handle is passed by value, in the pointer.
  void* handle = reinterpret_cast<void*>(static_cast<std::intptr_t>(descriptor.get()));
  detail::check_cuda(cudaMemPoolImportFromShareableHandle(&pool_, handle, cudaMemHandleTypePosixFileDescriptor, 0),
                     [&] {
                       return fmt::format("cudaMemPoolImportFromShareableHandle of descriptor {}: it is not the "
                                          "descriptor of an exported CUDA pool",
                                          descriptor.get());
                     });
}  // `descriptor` closes here; the imported pool holds its own reference

imported_pool::~imported_pool() {
  if (pool_ != nullptr) CUDAPMR_ASSERT_CUDA_SUCCESS(cudaMemPoolDestroy(pool_));
}

imported_pool::imported_pool(imported_pool&& other) noexcept : pool_(std::exchange(other.pool_, nullptr)) {}

imported_pool& imported_pool::operator=(imported_pool&& other) noexcept {
  if (this != &other) {
    imported_pool released(std::move(*this));
    pool_ = std::exchange(other.pool_, nullptr);
  }
  return *this;
}

ipc_memory_view imported_pool::open(const ipc_memory_handle& memory) const {
  if (pool_ == nullptr) throw std::invalid_argument("imported_pool::open: the pool was moved from");
  cudaMemPoolPtrExportData export_data = memory.export_data;  // CUDA takes it by non-const pointer
  void* p = nullptr;
  detail::check_cuda(cudaMemPoolImportPointer(&p, pool_, &export_data), [&] {
    return fmt::format("cudaMemPoolImportPointer of {} bytes: the description is not of memory in this imported pool",
                       memory.bytes);
  });
  ipc_memory_view view(p, memory.bytes);  // closes the import should a check fail
  // The byte count comes from the peer: a view past the real allocation would
  // let kernels reach other memory.
  require_within_allocation<std::runtime_error>(p, memory.bytes, "imported_pool::open", "the peer described");
  cudaPointerAttributes attributes{};
  detail::check_cuda(cudaPointerGetAttributes(&attributes, p), [&] {
    return fmt::format("cudaPointerGetAttributes of the imported memory at {}", fmt::ptr(p));
  });
  if (attributes.type != cudaMemoryTypeDevice)
    throw std::runtime_error(fmt::format("imported_pool::open: the imported memory at {} is not device memory "
                                         "(memory type {})",
                                         fmt::ptr(p), static_cast<int>(attributes.type)));
  return view;
}

// ---- ipc_memory_view ---------------------------------------------------------

ipc_memory_view::ipc_memory_view(ipc_memory_view&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

ipc_memory_view& ipc_memory_view::operator=(ipc_memory_view&& other) noexcept {
  if (this != &other) {
    close();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void ipc_memory_view::close() noexcept {
  if (data_ == nullptr) return;
  CUDAPMR_ASSERT_CUDA_SUCCESS(cudaFree(data_));
  data_ = nullptr;
  bytes_ = 0;
}

// ---- the lifetime protocol ---------------------------------------------------

void send_shared_memory(ipc_channel& channel, const pool_resource& resource, const void* p, std::size_t bytes,
                        stream_ref stream) {
  CUDAPMR_CHECK(cudaStreamSynchronize(stream.get()));
  const file_descriptor pool_descriptor = export_pool(resource);
  const shared_memory_message message{.memory = export_memory(p, bytes)};
  channel.send_value(message, pool_descriptor.get());
}

shared_memory receive_shared_memory(ipc_channel& channel) {
  auto [message, descriptor] = channel.receive_value_with_descriptor<shared_memory_message>();
  check_header(message.header, message_kind::shared_memory, "receive_shared_memory");
  if (!descriptor.is_open()) throw std::runtime_error("receive_shared_memory: the message carried no pool descriptor");
  imported_pool pool(std::move(descriptor));
  ipc_memory_view view = pool.open(message.memory);
  return {std::move(pool), std::move(view)};
}

void release_shared_memory(ipc_channel& channel, shared_memory&& memory, stream_ref stream) {
  CUDAPMR_CHECK(cudaStreamSynchronize(stream.get()));
  {
    shared_memory released = std::move(memory);  // closes the view, then the pool
  }
  channel.send_value(released_message{});
}

// ---- allocations of a virtual_memory_resource ----------------------------------

imported_virtual_memory::imported_virtual_memory(file_descriptor descriptor, std::size_t bytes, int device) {
  if (!descriptor.is_open()) throw std::invalid_argument("imported_virtual_memory: the descriptor is closed");
  if (bytes == 0) throw std::invalid_argument("imported_virtual_memory: 0 bytes");
  detail::validate_device_ordinal(device);
  const auto& calls = detail::load_virtual_memory_driver();
  // The descriptor's value travels as the pointer-sized handle the driver expects.
  void* shareable = reinterpret_cast<void*>(static_cast<std::uintptr_t>(descriptor.get()));
  CUmemGenericAllocationHandle handle = 0;
  detail::check_driver(calls.import_from_shareable_handle(&handle, shareable, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                       [&] { return fmt::format("cuMemImportFromShareableHandle of descriptor {}", descriptor.get()); });
  handle_ = handle;
  bytes_ = bytes;
  descriptor.reset();  // the imported handle keeps the memory
  try {
    CUdeviceptr address = 0;
    detail::check_driver(calls.address_reserve(&address, bytes, 0, 0, 0),
                         [&] { return fmt::format("cuMemAddressReserve of {} bytes for an import", bytes); });
    address_ = static_cast<std::uintptr_t>(address);
    if (const CUresult mapped = calls.map(address, bytes, 0, handle, 0); mapped != CUDA_SUCCESS) {
      detail::assert_driver_success(calls.address_free(address, bytes), "cuMemAddressFree", __FILE__, __LINE__);
      address_ = 0;
      detail::throw_driver_error(mapped, fmt::format("cuMemMap of an imported allocation as {} bytes (a size other "
                                                     "than the exported allocation's is refused)",
                                                     bytes));
    }
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    detail::check_driver(calls.set_access(address, bytes, &access, 1), [&] {
      return fmt::format("cuMemSetAccess of {} imported bytes for device {}", bytes, device);
    });
  } catch (...) {
    reset();
    throw;
  }
}

imported_virtual_memory::~imported_virtual_memory() { reset(); }

imported_virtual_memory::imported_virtual_memory(imported_virtual_memory&& other) noexcept
    : address_(std::exchange(other.address_, 0)),
      bytes_(std::exchange(other.bytes_, 0)),
      handle_(std::exchange(other.handle_, 0)) {}

imported_virtual_memory& imported_virtual_memory::operator=(imported_virtual_memory&& other) noexcept {
  if (this != &other) {
    reset();
    address_ = std::exchange(other.address_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
    handle_ = std::exchange(other.handle_, 0);
  }
  return *this;
}

void imported_virtual_memory::reset() noexcept {
  if (handle_ == 0) return;
  const auto& calls = detail::load_virtual_memory_driver();  // loaded: a handle exists
  if (address_ != 0) {
    // address_ is set only while mapped (a failed map frees the range at once).
    detail::assert_driver_success(calls.unmap(static_cast<CUdeviceptr>(address_), bytes_), "cuMemUnmap", __FILE__,
                                  __LINE__);
    detail::assert_driver_success(calls.address_free(static_cast<CUdeviceptr>(address_), bytes_), "cuMemAddressFree",
                                  __FILE__, __LINE__);
  }
  detail::assert_driver_success(calls.release(handle_), "cuMemRelease", __FILE__, __LINE__);
  address_ = 0;
  bytes_ = 0;
  handle_ = 0;
}

void send_virtual_memory(ipc_channel& channel, const virtual_memory_resource& resource, const void* p,
                         stream_ref stream) {
  CUDAPMR_CHECK(cudaStreamSynchronize(stream.get()));
  const virtual_memory_resource::exported_handle exported = resource.export_handle(p);
  const file_descriptor descriptor(exported.descriptor);
  channel.send_value(virtual_memory_message{.bytes = exported.bytes}, descriptor.get());
}

imported_virtual_memory receive_virtual_memory(ipc_channel& channel, int device) {
  detail::validate_device_ordinal(device);  // before the message is taken: a call with a good ordinal still finds it
  auto [message, descriptor] = channel.receive_value_with_descriptor<virtual_memory_message>();
  check_header(message.header, message_kind::virtual_memory, "receive_virtual_memory");
  if (!descriptor.is_open()) throw std::runtime_error("receive_virtual_memory: the message carried no descriptor");
  return imported_virtual_memory(std::move(descriptor), static_cast<std::size_t>(message.bytes), device);
}

void release_virtual_memory(ipc_channel& channel, imported_virtual_memory&& memory, stream_ref stream) {
  CUDAPMR_CHECK(cudaStreamSynchronize(stream.get()));
  {
    imported_virtual_memory released = std::move(memory);
  }
  channel.send_value(released_message{});
}

void wait_for_release(ipc_channel& channel) {
  check_header(channel.receive_value<released_message>().header, message_kind::released, "wait_for_release");
}

}  // namespace cudapmr
