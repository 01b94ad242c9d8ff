// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file ipc_channel.hpp
/// A local socket between processes of one user that carries small messages
/// and file descriptors (SCM_RIGHTS): how a CUDA pool's shareable handle, or an
/// NCCL unique id, travels from one process to another. Host-only; Linux.

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <span>
#include <type_traits>
#include <utility>

namespace cudapmr {

/// How long channel operations wait for the other side before they fail.
inline constexpr std::chrono::milliseconds default_ipc_timeout{std::chrono::minutes(2)};
/// The largest message a channel carries.
inline constexpr std::size_t max_ipc_message_bytes = 64 * 1024;

/// An owned POSIX file descriptor, closed on destruction. Move-only.
class file_descriptor final {
 public:
  /// Holds nothing.
  file_descriptor() noexcept = default;
  /// Takes ownership of `descriptor` (a negative value means none).
  explicit file_descriptor(int descriptor) noexcept : descriptor_(descriptor) {}
  ~file_descriptor() { reset(); }

  file_descriptor(file_descriptor&& other) noexcept : descriptor_(other.release()) {}
  file_descriptor& operator=(file_descriptor&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  file_descriptor(const file_descriptor&) = delete;
  file_descriptor& operator=(const file_descriptor&) = delete;

  /// The descriptor, or -1.
  [[nodiscard]] int get() const noexcept { return descriptor_; }
  [[nodiscard]] bool is_open() const noexcept { return descriptor_ >= 0; }
  /// Gives up ownership without closing.
  [[nodiscard]] int release() noexcept { return std::exchange(descriptor_, -1); }
  /// Closes the held descriptor and takes `descriptor`. Never throws.
  void reset(int descriptor = -1) noexcept;

 private:
  int descriptor_ = -1;
};

/// One end of a connected local socket (SOCK_SEQPACKET: reliable, ordered,
/// message boundaries kept). Each message is a byte payload of a size both
/// sides agree on, with at most one file descriptor attached. Every operation
/// waits at most `timeout()` for the other side (`milliseconds::max()`: with
/// no limit). Move-only; not thread-safe.
class ipc_channel final {
 public:
  /// Connects to the listener at `socket_path` (see ipc_listener), which must
  /// be a process of this user: another user's listener could send forged
  /// descriptors or ids.
  /// \throws std::system_error naming the path where the connection is refused
  ///   (no listener, or a directory this user may not enter), and
  ///   permission_denied naming the listener's process and user where it is another user's.
  [[nodiscard]] static ipc_channel connect(const std::filesystem::path& socket_path,
                                           std::chrono::milliseconds timeout = default_ipc_timeout);
  /// Two connected ends in this process (socketpair). \throws std::system_error.
  [[nodiscard]] static std::pair<ipc_channel, ipc_channel> make_pair(
      std::chrono::milliseconds timeout = default_ipc_timeout);
  /// Adopts a connected SOCK_SEQPACKET socket.
  explicit ipc_channel(file_descriptor socket, std::chrono::milliseconds timeout = default_ipc_timeout) noexcept
      : socket_(std::move(socket)), timeout_(timeout) {}

  /// Sends `payload` as one message; where `descriptor` is not negative, the
  /// receiver gets its own duplicate of it (the caller keeps and still closes its own).
  /// \throws std::invalid_argument for an empty payload or one over
  ///   max_ipc_message_bytes; std::system_error on failure or timeout.
  void send(std::span<const std::byte> payload, int descriptor = -1);
  /// Receives one message, which must be exactly `payload.size()` bytes, and
  /// returns the descriptor that came with it (closed where none came).
  /// \throws std::runtime_error when the peer has closed the channel or the
  ///   message has another size; std::system_error on failure or timeout.
  file_descriptor receive(std::span<std::byte> payload);

  /// Sends the bytes of `value`, as `send` does.
  template <class T>
  void send_value(const T& value, int descriptor = -1) {
    static_assert(std::is_trivially_copyable_v<T>, "only trivially copyable values travel as bytes");
    send(std::as_bytes(std::span<const T, 1>(&value, 1)), descriptor);
  }
  /// Receives a value sent with `send_value`; a descriptor that came with it is closed.
  template <class T>
  [[nodiscard]] T receive_value() {
    return receive_value_with_descriptor<T>().first;
  }
  /// Receives a value sent with `send_value` and the descriptor that came with it.
  template <class T>
  [[nodiscard]] std::pair<T, file_descriptor> receive_value_with_descriptor() {
    static_assert(std::is_trivially_copyable_v<T>, "only trivially copyable values travel as bytes");
    T value{};
    file_descriptor descriptor = receive(std::as_writable_bytes(std::span<T, 1>(&value, 1)));
    return {value, std::move(descriptor)};
  }

  [[nodiscard]] std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout) noexcept { timeout_ = timeout; }
  /// The socket's descriptor.
  [[nodiscard]] int native_handle() const noexcept { return socket_.get(); }

 private:
  file_descriptor socket_;
  std::chrono::milliseconds timeout_;
};

/// A listening socket in a directory of its own, created with mkdtemp (mode
/// 0700, owned by this user), so that no other user's process can reach it;
/// connections from another user id are refused as well. The socket and the
/// directory are removed on destruction. Not movable: hand out `socket_path()`.
class ipc_listener final {
 public:
  /// Creates the private directory under `parent` and listens in it.
  /// \throws std::invalid_argument when the socket's path is too long for a
  ///   Unix socket address; std::system_error when the directory or socket cannot be made.
  explicit ipc_listener(const std::filesystem::path& parent = std::filesystem::temp_directory_path());
  /// Closes the socket and removes it and its directory. Never throws.
  ~ipc_listener();
  ipc_listener(const ipc_listener&) = delete;
  ipc_listener& operator=(const ipc_listener&) = delete;

  /// Where peers connect (`ipc_channel::connect`).
  [[nodiscard]] const std::filesystem::path& socket_path() const noexcept { return socket_path_; }
  /// The private directory that holds the socket.
  [[nodiscard]] const std::filesystem::path& directory() const noexcept { return directory_; }

  /// Waits at most `timeout` for a process to connect; the channel it returns
  /// waits `timeout` per operation too.
  /// \throws std::system_error on timeout (std::errc::timed_out), when the
  ///   peer runs as another user (std::errc::permission_denied), or on failure.
  [[nodiscard]] ipc_channel accept(std::chrono::milliseconds timeout = default_ipc_timeout);
  /// As above, but asks `peer_alive` about ten times a second whether to keep
  /// waiting: a launcher stops waiting for a child that has already ended.
  /// \throws as above, and std::system_error (std::errc::no_such_process)
  ///   once `peer_alive` returns false.
  [[nodiscard]] ipc_channel accept(std::chrono::milliseconds timeout, const std::function<bool()>& peer_alive);

 private:
  /// Accepts the connection that is ready; the channel waits `timeout` per operation.
  [[nodiscard]] ipc_channel accept_ready(std::chrono::milliseconds timeout);

  std::filesystem::path directory_;
  std::filesystem::path socket_path_;
  file_descriptor socket_;
};

}  // namespace cudapmr
