// SPDX-License-Identifier: Apache-2.0
// ipc_channel, ipc_listener and file_descriptor: messages and descriptors
// between processes, and who may connect. Host-only.
#include <cudapmr/multiprocess/ipc_channel.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>

namespace cudapmr {
namespace {

using namespace std::chrono_literals;

bool is_open_descriptor(int descriptor) { return ::fcntl(descriptor, F_GETFD) != -1 || errno != EBADF; }

/// Runs `body` in a forked child, which exits 0 where `body` returns true and
/// 1 otherwise; the child calls no test macros.
template <class Body>
pid_t start_child(Body body) {
  const pid_t child = ::fork();
  if (child == 0) {
    bool passed = false;
    try {
      passed = body();
    } catch (...) {
    }
    ::_exit(passed ? 0 : 1);
  }
  return child;
}

int exit_status(pid_t child) {
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// Expects `call` to throw `Error` whose message contains `text`.
template <class Error, class Call>
void expect_error_mentioning(Call call, std::string_view text) {
  try {
    call();
    ADD_FAILURE() << "no exception; expected one that says '" << text << "'";
  } catch (const Error& error) {
    EXPECT_NE(std::string_view(error.what()).find(text), std::string_view::npos) << error.what();
  }
}

struct pipe_ends {
  file_descriptor read;
  file_descriptor write;
};

pipe_ends make_pipe() {
  int ends[2] = {-1, -1};
  if (::pipe(ends) != 0) throw std::system_error(errno, std::generic_category(), "pipe");
  return {file_descriptor(ends[0]), file_descriptor(ends[1])};
}

TEST(FileDescriptor, ClosesOnDestructionAndNotAfterRelease) {
  pipe_ends pipe = make_pipe();
  const int read_end = pipe.read.get();
  { const file_descriptor owner(std::move(pipe.read)); }
  EXPECT_FALSE(is_open_descriptor(read_end));
  const int write_end = pipe.write.release();
  EXPECT_FALSE(pipe.write.is_open());
  EXPECT_TRUE(is_open_descriptor(write_end));
  ::close(write_end);
}

TEST(IpcListener, MakesAPrivateDirectoryAndRemovesIt) {
  std::filesystem::path directory;
  std::filesystem::path socket;
  {
    const ipc_listener listener;
    directory = listener.directory();
    socket = listener.socket_path();
    struct stat status {};
    ASSERT_EQ(::lstat(directory.c_str(), &status), 0);
    EXPECT_TRUE(S_ISDIR(status.st_mode));
    EXPECT_EQ(status.st_mode & 0777, 0700u) << "only the owner may enter";
    EXPECT_EQ(status.st_uid, ::geteuid());
    ASSERT_EQ(::lstat(socket.c_str(), &status), 0);
    EXPECT_TRUE(S_ISSOCK(status.st_mode));
    EXPECT_EQ(socket.parent_path(), directory);
  }
  EXPECT_FALSE(std::filesystem::exists(socket));
  EXPECT_FALSE(std::filesystem::exists(directory));
}

TEST(IpcListener, RefusesAPathTooLongForASocketAddress) {
  const std::filesystem::path parent = std::filesystem::temp_directory_path() / std::string(120, 'x');
  expect_error_mentioning<std::invalid_argument>([&] { const ipc_listener listener(parent); }, "at most 107");
}

TEST(IpcChannel, ValuesTravelBothWays) {
  ipc_listener listener;
  std::thread peer([path = listener.socket_path()] {
    ipc_channel channel = ipc_channel::connect(path);
    const auto value = channel.receive_value<std::uint64_t>();
    channel.send_value(value + 1);
  });
  ipc_channel channel = listener.accept(10s);
  channel.send_value(std::uint64_t{41});
  EXPECT_EQ(channel.receive_value<std::uint64_t>(), 42u);
  peer.join();
}

TEST(IpcChannel, ADescriptorReachesAnotherProcess) {
  ipc_listener listener;
  pipe_ends pipe = make_pipe();
  const pid_t child = start_child([path = listener.socket_path()] {
    ipc_channel channel = ipc_channel::connect(path, 10s);
    auto [tag, descriptor] = channel.receive_value_with_descriptor<std::uint32_t>();
    constexpr char greeting[] = "over SCM_RIGHTS";
    return tag == 7 && descriptor.is_open() &&
           ::write(descriptor.get(), greeting, sizeof(greeting)) == static_cast<ssize_t>(sizeof(greeting));
  });
  ipc_channel channel = listener.accept(10s);
  channel.send_value(std::uint32_t{7}, pipe.write.get());
  pipe.write.reset();  // the child writes through its own copy of the descriptor
  std::array<char, 32> received{};
  const ssize_t bytes = ::read(pipe.read.get(), received.data(), received.size());
  EXPECT_EQ(exit_status(child), 0);
  ASSERT_GT(bytes, 0);
  EXPECT_STREQ(received.data(), "over SCM_RIGHTS");
}

TEST(IpcChannel, AMessageOfAnotherSizeIsRefusedNamingTheSizes) {
  auto [first, second] = ipc_channel::make_pair(1s);
  first.send_value(std::uint64_t{1});
  expect_error_mentioning<std::runtime_error>([&] { static_cast<void>(second.receive_value<std::uint32_t>()); },
                                              "longer than expected");
  first.send_value(std::uint32_t{1});
  expect_error_mentioning<std::runtime_error>([&] { static_cast<void>(second.receive_value<std::uint64_t>()); },
                                              "was 4 bytes");
}

TEST(IpcChannel, EmptyAndOversizedMessagesAreRefused) {
  auto [first, second] = ipc_channel::make_pair(1s);
  EXPECT_THROW(first.send({}), std::invalid_argument);
  std::vector<std::byte> large(max_ipc_message_bytes + 1);
  EXPECT_THROW(first.send(large), std::invalid_argument);
}

TEST(IpcChannel, ReceivingFromAClosedChannelSaysSo) {
  auto [first, second] = ipc_channel::make_pair(1s);
  { const ipc_channel closing = std::move(first); }
  expect_error_mentioning<std::runtime_error>([&] { static_cast<void>(second.receive_value<int>()); },
                                              "closed the channel");
}

TEST(IpcChannel, WaitingEndsAtTheTimeout) {
  auto [first, second] = ipc_channel::make_pair(20ms);
  try {
    static_cast<void>(second.receive_value<int>());
    ADD_FAILURE() << "received a message nobody sent";
  } catch (const std::system_error& error) {
    EXPECT_EQ(error.code(), std::errc::timed_out) << error.what();
  }
  ipc_listener listener;
  try {
    static_cast<void>(listener.accept(20ms));
    ADD_FAILURE() << "accepted a connection nobody made";
  } catch (const std::system_error& error) {
    EXPECT_EQ(error.code(), std::errc::timed_out) << error.what();
  }
}

TEST(IpcChannel, TheLongestTimeoutWaitsRatherThanEndingAtOnce) {
  // milliseconds::max() is "wait for ever": the deadline must not overflow into the past.
  auto [first, second] = ipc_channel::make_pair(std::chrono::milliseconds::max());
  std::thread sending([&] {
    std::this_thread::sleep_for(100ms);
    first.send_value(7);
  });
  int received = 0;
  EXPECT_NO_THROW(received = second.receive_value<int>());
  sending.join();
  EXPECT_EQ(received, 7);
}

TEST(IpcListener, StopsWaitingWhenThePeerIsGone) {
  ipc_listener listener;
  int asked = 0;
  try {
    static_cast<void>(listener.accept(10s, [&] { return ++asked < 3; }));
    ADD_FAILURE() << "accepted a connection nobody made";
  } catch (const std::system_error& error) {
    EXPECT_EQ(error.code(), std::errc::no_such_process) << error.what();
  }
  EXPECT_EQ(asked, 3);
}

TEST(IpcChannel, ConnectingWhereNoOneListensNamesThePath) {
  const ipc_listener listener;
  const std::filesystem::path nowhere = listener.directory() / "nobody";
  expect_error_mentioning<std::system_error>([&] { static_cast<void>(ipc_channel::connect(nowhere)); },
                                             nowhere.string());
}

TEST(IpcListener, AnotherUserCannotConnect) {
  if (::geteuid() != 0) GTEST_SKIP() << "acting as another user needs root";
  ipc_listener listener;
  const pid_t child = start_child([path = listener.socket_path()] {
    // Become `nobody`, then try the socket: the private directory must keep us out.
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) return false;
    struct stat status {};
    if (::stat(path.c_str(), &status) == 0 || errno != EACCES) return false;  // the directory hides the socket
    try {
      static_cast<void>(ipc_channel::connect(path, 1s));
      return false;
    } catch (const std::system_error& error) {
      return error.code() == std::errc::permission_denied;
    }
  });
  EXPECT_EQ(exit_status(child), 0) << "another user's process reached the socket (or could not become that user)";
  EXPECT_THROW(static_cast<void>(listener.accept(20ms)), std::system_error) << "nobody may have connected";
}

TEST(IpcChannel, AListenerOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "acting as another user needs root";
  // A child becomes `nobody`, listens, and tells us where; root can reach any
  // path, so only the check of the listener's credentials keeps us out.
  std::array<int, 2> where{-1, -1};
  ASSERT_EQ(::pipe(where.data()), 0);
  const pid_t child = start_child([&where] {
    ::close(where[0]);
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) return false;
    ipc_listener listener;
    const std::string path = listener.socket_path().string();
    if (::write(where[1], path.data(), path.size()) != static_cast<ssize_t>(path.size())) return false;
    ::close(where[1]);
    try {
      static_cast<void>(listener.accept(5s));  // the parent connects, then must refuse what it reached
    } catch (const std::system_error&) {
    }
    return true;
  });
  ::close(where[1]);
  std::array<char, 512> path{};
  const ssize_t length = ::read(where[0], path.data(), path.size() - 1);
  ::close(where[0]);
  ASSERT_GT(length, 0) << "the child could not become nobody or listen";
  try {
    static_cast<void>(ipc_channel::connect(std::string(path.data(), static_cast<std::size_t>(length)), 1s));
    ADD_FAILURE() << "connected to a listener of user nobody";
  } catch (const std::system_error& error) {
    EXPECT_EQ(error.code(), std::errc::permission_denied) << error.what();
    EXPECT_NE(std::string(error.what()).find("user 65534"), std::string::npos) << error.what();
  }
  EXPECT_EQ(exit_status(child), 0);
}

}  // namespace
}  // namespace cudapmr
