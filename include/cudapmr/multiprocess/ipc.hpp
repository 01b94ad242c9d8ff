// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file ipc.hpp
/// Sharing pool memory between processes on one machine (CUDA IPC memory
/// pools), and the allocations of a virtual_memory_resource (below).
///
/// The exporter owns a pool made with `device_pool_options{.ipc_enabled = true}`
/// and memory allocated from it; the importer opens that memory as a view.
/// Lifetime protocol, over an ipc_channel:
///
///  1. exporter: `send_shared_memory` waits for the stream that allocated and
///     wrote the memory, then sends the pool's file descriptor and the memory's
///     description in one message;
///  2. importer: `receive_shared_memory` imports the pool and opens the view;
///     it reads and writes the memory like its own;
///  3. importer: `release_shared_memory` waits for its stream, closes the view
///     and the imported pool, and then sends "released";
///  4. exporter: `wait_for_release` returns once "released" has arrived; only
///     now may the memory be freed and the pool destroyed (CUDA requires every
///     importer to free its mapping before the exporter frees the memory).
///
/// The pool's descriptor is the capability: a process that never received it
/// cannot import the pool, and without the pool the description opens nothing.

#include "cudapmr/buffer.hpp"
#include "cudapmr/multiprocess/ipc_channel.hpp"
#include "cudapmr/pool_resource.hpp"
#include "cudapmr/stream.hpp"
#include "cudapmr/virtual_memory_resource.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>

namespace cudapmr {

/// What an importer needs, besides the pool's descriptor, to open one
/// allocation: CUDA's export data and the size. Plain bytes, safe to send anywhere.
struct ipc_memory_handle {
  cudaMemPoolPtrExportData export_data{};
  std::size_t bytes = 0;
};

/// A file descriptor through which another process can import `resource`'s pool.
/// \throws cuda_error when the pool was not created with IPC enabled
///   (`device_pool_options{.ipc_enabled = true}`) or CUDA refuses.
[[nodiscard]] file_descriptor export_pool(const pool_resource& resource);

/// Describes [p, p + bytes), memory allocated from an IPC-enabled pool that
/// `export_pool` has already exported (CUDA describes memory only of a pool
/// already shared; `send_shared_memory` keeps that order).
/// \throws std::invalid_argument for a null pointer, or where [p, p + bytes)
///   is not within one CUDA allocation (naming both sizes); cuda_error when
///   the memory is not from an IPC-enabled pool or its pool was not exported first.
[[nodiscard]] ipc_memory_handle export_memory(const void* p, std::size_t bytes);
/// Describes the memory of `exported`. \throws as above, and std::invalid_argument for a closed buffer.
template <class T>
[[nodiscard]] ipc_memory_handle export_memory(const buffer<T>& exported) {
  return export_memory(exported.data(), exported.size_bytes());
}

class ipc_memory_view;

/// A pool of another process, imported into this one: its memory can be
/// opened, never allocated. Destroy it only after closing its views. Move-only.
class imported_pool final {
 public:
  /// Imports the pool behind `descriptor` (what `export_pool` gave the
  /// exporter, received over an ipc_channel) and closes the descriptor.
  /// \throws std::invalid_argument for a closed descriptor; cuda_error when
  ///   CUDA refuses it (not a pool's descriptor).
  explicit imported_pool(file_descriptor descriptor);
  /// Releases the imported pool. Never throws.
  ~imported_pool();
  imported_pool(imported_pool&& other) noexcept;
  imported_pool& operator=(imported_pool&& other) noexcept;
  imported_pool(const imported_pool&) = delete;
  imported_pool& operator=(const imported_pool&) = delete;

  [[nodiscard]] cudaMemPool_t get() const noexcept { return pool_; }

  /// Opens the exporter's memory described by `memory`. Synchronous; use it
  /// only after the exporter's writes are complete (step 1 sees to that).
  /// The description comes from another process and is checked against what
  /// the driver says of the imported memory.
  /// \throws cuda_error when the description is not of this pool's memory;
  ///   std::runtime_error naming both sizes where it claims more bytes than
  ///   the imported allocation holds, or where the memory is not device memory.
  [[nodiscard]] ipc_memory_view open(const ipc_memory_handle& memory) const;

 private:
  cudaMemPool_t pool_ = nullptr;
};

/// Another process's memory, opened in this one: reads and writes reach the
/// exporter's memory. Owns only this process's mapping, which closing releases.
class ipc_memory_view final {
 public:
  /// An empty, closed view.
  ipc_memory_view() noexcept = default;
  /// Closes the view. Never throws.
  ~ipc_memory_view() { close(); }
  ipc_memory_view(ipc_memory_view&& other) noexcept;
  ipc_memory_view& operator=(ipc_memory_view&& other) noexcept;
  ipc_memory_view(const ipc_memory_view&) = delete;
  ipc_memory_view& operator=(const ipc_memory_view&) = delete;

  [[nodiscard]] void* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size_bytes() const noexcept { return bytes_; }
  [[nodiscard]] bool is_open() const noexcept { return data_ != nullptr; }
  /// The memory as whole elements of `T`; device memory: dereference it in kernels only.
  template <class T>
  [[nodiscard]] std::span<T> span() const noexcept {
    return {static_cast<T*>(data_), bytes_ / sizeof(T)};
  }

  /// Releases this process's mapping (cudaFree); work of this process that
  /// uses the memory must be complete. Closing a closed view does nothing. Never throws.
  void close() noexcept;

 private:
  friend class imported_pool;
  ipc_memory_view(void* data, std::size_t bytes) noexcept : data_(data), bytes_(bytes) {}

  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

/// What an importer holds: the imported pool and the view opened from it
/// (declared in this order, so that the view closes first).
struct shared_memory {
  imported_pool pool;
  ipc_memory_view view;
};

/// Exporter, step 1: synchronizes `stream` (the importer sees no stream order
/// of this process), then sends `resource`'s pool descriptor and the
/// description of [p, p + bytes) as one message.
/// \throws as export_pool and export_memory; std::system_error from the channel.
void send_shared_memory(ipc_channel& channel, const pool_resource& resource, const void* p, std::size_t bytes,
                        stream_ref stream);
/// Exporter, step 1, for a buffer drawn from `resource`.
template <class T>
void send_shared_memory(ipc_channel& channel, const pool_resource& resource, const buffer<T>& shared,
                        stream_ref stream) {
  send_shared_memory(channel, resource, shared.data(), shared.size_bytes(), stream);
}

/// Importer, step 2: receives the message of step 1, imports the pool and opens the memory.
/// \throws std::runtime_error for a message that is not step 1's; cuda_error
///   when CUDA refuses the pool or the memory; std::system_error from the channel.
[[nodiscard]] shared_memory receive_shared_memory(ipc_channel& channel);

/// Importer, step 3: synchronizes `stream` (this process's last work on the
/// memory), closes the view and the pool, then tells the exporter.
/// \throws std::system_error from the channel; cuda_error from the synchronize.
void release_shared_memory(ipc_channel& channel, shared_memory&& memory, stream_ref stream);

// ---- allocations of a virtual_memory_resource ----------------------------------
//
// The same lifetime protocol carries one allocation of a
// virtual_memory_resource: `send_virtual_memory` (step 1) sends its file
// descriptor (virtual_memory_resource::export_handle) and size;
// `receive_virtual_memory` (step 2) imports and maps it; the importer ends with
// `release_virtual_memory` (step 3) and the exporter frees the allocation only
// after `wait_for_release` (step 4). The descriptor is the capability.

/// Another process's (or this one's) virtual_memory_resource allocation,
/// imported and mapped into this process at an address of its own: writes
/// through either address reach the same memory, visible through the other
/// after the writing work completes. Owns its address range, mapping and
/// handle, which destruction gives back. Move-only.
class imported_virtual_memory final {
 public:
  /// Imports the allocation behind `descriptor` (from export_handle) of
  /// `bytes` (the exporter's exported_handle::bytes), maps it and lets `device`
  /// read and write it; closes the descriptor.
  /// \throws std::invalid_argument for a closed descriptor, zero bytes or a bad
  ///   ordinal; cuda_error where the driver refuses (not such a descriptor, a
  ///   size other than the allocation's).
  imported_virtual_memory(file_descriptor descriptor, std::size_t bytes, int device);
  /// Unmaps, releases the handle, frees the address range. Work of this
  /// process that uses the memory must be complete. Never throws.
  ~imported_virtual_memory();
  imported_virtual_memory(imported_virtual_memory&& other) noexcept;
  imported_virtual_memory& operator=(imported_virtual_memory&& other) noexcept;
  imported_virtual_memory(const imported_virtual_memory&) = delete;
  imported_virtual_memory& operator=(const imported_virtual_memory&) = delete;

  [[nodiscard]] void* data() const noexcept { return reinterpret_cast<void*>(address_); }
  [[nodiscard]] std::size_t size_bytes() const noexcept { return bytes_; }
  /// The memory as whole elements of `T`; device memory: dereference it in kernels only.
  template <class T>
  [[nodiscard]] std::span<T> span() const noexcept {
    return {static_cast<T*>(data()), bytes_ / sizeof(T)};
  }

 private:
  void reset() noexcept;

  std::uintptr_t address_ = 0;
  std::size_t bytes_ = 0;
  unsigned long long handle_ = 0;  // the imported CUmemGenericAllocationHandle
};

/// Exporter, step 1: synchronizes `stream`, then sends the descriptor and size
/// of the allocation of `resource` that starts at `p`.
/// \throws as virtual_memory_resource::export_handle; std::system_error from the channel.
void send_virtual_memory(ipc_channel& channel, const virtual_memory_resource& resource, const void* p,
                         stream_ref stream);
/// Importer, step 2: receives step 1's message and maps the allocation for `device`.
/// \throws std::invalid_argument for a bad device ordinal, before the message
///   is taken (it stays in the channel); std::runtime_error for a message that
///   is not step 1's or carries no descriptor; as imported_virtual_memory's
///   constructor; std::system_error from the channel.
[[nodiscard]] imported_virtual_memory receive_virtual_memory(ipc_channel& channel, int device);
/// Importer, step 3: synchronizes `stream`, unmaps the memory, then tells the exporter.
/// \throws std::system_error from the channel; cuda_error from the synchronize.
void release_virtual_memory(ipc_channel& channel, imported_virtual_memory&& memory, stream_ref stream);

/// Exporter, step 4: blocks until the importer has released the memory
/// (or the channel's timeout has passed).
/// \throws std::runtime_error when something else arrives or the importer is
///   gone; std::system_error on timeout.
void wait_for_release(ipc_channel& channel);

}  // namespace cudapmr
