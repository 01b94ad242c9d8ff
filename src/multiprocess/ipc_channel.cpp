// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/multiprocess/ipc_channel.hpp"

#include "cudapmr/detail/deadline.hpp"

#include <fmt/format.h>

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace cudapmr {
namespace {

/// The most descriptors one message may bring; any past the first are closed.
constexpr std::size_t max_descriptors_per_message = 4;

[[noreturn]] void throw_errno(const std::string& what) { throw std::system_error(errno, std::generic_category(), what); }

file_descriptor make_socket() {
  const int descriptor = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (descriptor < 0) throw_errno("creating a Unix-domain socket");
  return file_descriptor(descriptor);
}

sockaddr_un socket_address(const std::filesystem::path& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string& name = path.native();
  if (name.size() >= sizeof(address.sun_path))
    throw std::invalid_argument(fmt::format("ipc socket path '{}' is {} bytes long; a Unix socket address holds at most {}",
                                            name, name.size(), sizeof(address.sun_path) - 1));
  std::memcpy(address.sun_path, name.c_str(), name.size() + 1);
  return address;
}

/// Whether `socket` became ready for `events` within `timeout`.
bool is_ready_within(int socket, short events, std::chrono::milliseconds timeout, const std::string& operation) {
  pollfd entry{socket, events, 0};
  const auto deadline = detail::deadline_after(timeout);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    const int wait_ms = static_cast<int>(std::clamp<std::chrono::milliseconds::rep>(left.count(), 0, INT_MAX));
    const int ready = ::poll(&entry, 1, wait_ms);
    if (ready > 0) return true;  // hang-ups and errors are reported by the call that follows
    if (ready == 0) return false;
    if (errno != EINTR) throw_errno(operation);
  }
}

[[noreturn]] void throw_timeout(const std::string& operation, std::chrono::milliseconds timeout) {
  throw std::system_error(std::make_error_code(std::errc::timed_out),
                          fmt::format("{}: the other side did not answer within {} ms", operation, timeout.count()));
}

/// Blocks until `socket` is ready for `events`. \throws std::system_error after `timeout`.
void wait_until_ready(int socket, short events, std::chrono::milliseconds timeout, const std::string& operation) {
  if (!is_ready_within(socket, events, timeout, operation)) throw_timeout(operation, timeout);
}

/// Makes `parent`/cudapmr-ipc-XXXXXX with mode 0700 and checks that it is ours.
std::filesystem::path make_private_directory(const std::filesystem::path& parent) {
  std::string name = (parent / "cudapmr-ipc-XXXXXX").native();
  if (::mkdtemp(name.data()) == nullptr) throw_errno(fmt::format("creating a private directory under {}", parent.string()));
  struct stat status {};
  // mkdtemp makes it 0700 less the umask; set it exactly, and verify the owner.
  if (::chmod(name.c_str(), S_IRWXU) != 0 || ::lstat(name.c_str(), &status) != 0) {
    const int error = errno;
    static_cast<void>(::rmdir(name.c_str()));
    throw std::system_error(error, std::generic_category(), fmt::format("securing the private directory {}", name));
  }
  if (!S_ISDIR(status.st_mode) || status.st_uid != ::geteuid() || (status.st_mode & 0777) != S_IRWXU) {
    static_cast<void>(::rmdir(name.c_str()));
    throw std::system_error(std::make_error_code(std::errc::permission_denied),
                            fmt::format("{} is not a directory of mode 0700 owned by user {}", name, ::geteuid()));
  }
  return name;
}

}  // namespace

// ---- file_descriptor ---------------------------------------------------------

void file_descriptor::reset(int descriptor) noexcept {
  if (descriptor_ >= 0) static_cast<void>(::close(descriptor_));
  descriptor_ = descriptor;
}

// ---- ipc_channel -------------------------------------------------------------

namespace {

/// Refuses a connected peer of another user: SO_PEERCRED gives the connecting
/// process's credentials on the listener's side and the listening process's
/// on the connecting side.
void require_same_user(const file_descriptor& connection, const std::string& operation, const char* role) {
  ucred peer{};
  socklen_t length = sizeof(peer);
  if (::getsockopt(connection.get(), SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0)
    throw_errno(fmt::format("{}: reading the peer's credentials", operation));
  if (peer.uid != ::geteuid())
    throw std::system_error(std::make_error_code(std::errc::permission_denied),
                            fmt::format("{}: refused the {} {} of user {}; only user {} is trusted", operation, role,
                                        peer.pid, peer.uid, ::geteuid()));
}

}  // namespace

ipc_channel ipc_channel::connect(const std::filesystem::path& socket_path, std::chrono::milliseconds timeout) {
  const sockaddr_un address = socket_address(socket_path);
  file_descriptor socket = make_socket();
  int result = 0;
  do {
    result = ::connect(socket.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  } while (result != 0 && errno == EINTR);
  const std::string operation = fmt::format("connecting to the ipc socket {}", socket_path.string());
  if (result != 0) throw_errno(operation);
  // A listener of another user could send a forged pool descriptor or NCCL id.
  require_same_user(socket, operation, "listening process");
  return ipc_channel(std::move(socket), timeout);
}

std::pair<ipc_channel, ipc_channel> ipc_channel::make_pair(std::chrono::milliseconds timeout) {
  int ends[2] = {-1, -1};
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends) != 0) throw_errno("creating a socket pair");
  return {ipc_channel(file_descriptor(ends[0]), timeout), ipc_channel(file_descriptor(ends[1]), timeout)};
}

void ipc_channel::send(std::span<const std::byte> payload, int descriptor) {
  if (payload.empty() || payload.size() > max_ipc_message_bytes)
    throw std::invalid_argument(fmt::format("ipc_channel::send: a message holds 1 to {} bytes, not {}",
                                            max_ipc_message_bytes, payload.size()));
  const std::string operation = fmt::format("ipc_channel::send of {} bytes", payload.size());
  wait_until_ready(socket_.get(), POLLOUT, timeout_, operation);

  iovec data{const_cast<std::byte*>(payload.data()), payload.size()};
  alignas(cmsghdr) unsigned char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  if (descriptor >= 0) {
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(header), &descriptor, sizeof(int));
  }
  ssize_t sent = 0;
  do {
    sent = ::sendmsg(socket_.get(), &message, MSG_NOSIGNAL);  // a closed peer is an error, not SIGPIPE
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) throw_errno(operation);
}

file_descriptor ipc_channel::receive(std::span<std::byte> payload) {
  const std::string operation = fmt::format("ipc_channel::receive of {} bytes", payload.size());
  wait_until_ready(socket_.get(), POLLIN, timeout_, operation);

  iovec data{payload.data(), payload.size()};
  alignas(cmsghdr) unsigned char control[CMSG_SPACE(sizeof(int) * max_descriptors_per_message)] = {};
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  ssize_t received = 0;
  do {
    received = ::recvmsg(socket_.get(), &message, MSG_CMSG_CLOEXEC);
  } while (received < 0 && errno == EINTR);
  if (received < 0) throw_errno(operation);

  // Own every descriptor that arrived before anything can throw.
  std::vector<file_descriptor> descriptors;
  for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr; header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int descriptor = -1;
      std::memcpy(&descriptor, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
      descriptors.emplace_back(descriptor);
    }
  }
  if (received == 0) throw std::runtime_error(fmt::format("{}: the other side closed the channel", operation));
  if ((message.msg_flags & MSG_TRUNC) != 0)
    throw std::runtime_error(fmt::format("{}: the message was longer than expected", operation));
  if (static_cast<std::size_t>(received) != payload.size())
    throw std::runtime_error(fmt::format("{}: the message was {} bytes", operation, received));
  if ((message.msg_flags & MSG_CTRUNC) != 0)
    throw std::runtime_error(fmt::format("{}: more than {} descriptors came with the message", operation,
                                         max_descriptors_per_message));
  if (descriptors.empty()) return {};
  return std::move(descriptors.front());
}

// ---- ipc_listener ------------------------------------------------------------

ipc_listener::ipc_listener(const std::filesystem::path& parent) {
  // Refuse an over-long path before anything is created.
  static_cast<void>(socket_address(parent / "cudapmr-ipc-XXXXXX" / "socket"));
  directory_ = make_private_directory(parent);
  try {
    socket_path_ = directory_ / "socket";
    const sockaddr_un address = socket_address(socket_path_);
    socket_ = make_socket();
    if (::bind(socket_.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0)
      throw_errno(fmt::format("binding the ipc socket {}", socket_path_.string()));
    if (::chmod(socket_path_.c_str(), S_IRUSR | S_IWUSR) != 0)
      throw_errno(fmt::format("restricting the ipc socket {} to its owner", socket_path_.string()));
    if (::listen(socket_.get(), SOMAXCONN) != 0)
      throw_errno(fmt::format("listening on the ipc socket {}", socket_path_.string()));
  } catch (...) {
    socket_.reset();
    static_cast<void>(::unlink(socket_path_.c_str()));
    static_cast<void>(::rmdir(directory_.c_str()));
    throw;
  }
}

ipc_listener::~ipc_listener() {
  socket_.reset();
  static_cast<void>(::unlink(socket_path_.c_str()));
  static_cast<void>(::rmdir(directory_.c_str()));
}

ipc_channel ipc_listener::accept(std::chrono::milliseconds timeout) {
  wait_until_ready(socket_.get(), POLLIN, timeout, fmt::format("accepting a connection on {}", socket_path_.string()));
  return accept_ready(timeout);
}

ipc_channel ipc_listener::accept(std::chrono::milliseconds timeout, const std::function<bool()>& peer_alive) {
  const std::string operation = fmt::format("accepting a connection on {}", socket_path_.string());
  constexpr std::chrono::milliseconds slice{100};
  const auto deadline = detail::deadline_after(timeout);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (is_ready_within(socket_.get(), POLLIN, std::clamp(left, std::chrono::milliseconds(0), slice), operation))
      return accept_ready(timeout);
    if (!peer_alive())
      throw std::system_error(std::make_error_code(std::errc::no_such_process),
                              fmt::format("{}: the process expected to connect has ended", operation));
    if (left <= slice) throw_timeout(operation, timeout);
  }
}

ipc_channel ipc_listener::accept_ready(std::chrono::milliseconds timeout) {
  const std::string operation = fmt::format("accepting a connection on {}", socket_path_.string());
  int descriptor = -1;
  do {
    descriptor = ::accept4(socket_.get(), nullptr, nullptr, SOCK_CLOEXEC);
  } while (descriptor < 0 && errno == EINTR);
  if (descriptor < 0) throw_errno(operation);
  file_descriptor connection(descriptor);

  // The directory keeps other users out; the peer's credentials are checked as well.
  require_same_user(connection, operation, "connecting process");
  return ipc_channel(std::move(connection), timeout);
}

}  // namespace cudapmr
