// SPDX-License-Identifier: Apache-2.0
#include "cudapmr/multiprocess/process.hpp"

#include "cudapmr/detail/deadline.hpp"

#include <fmt/format.h>

#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <utility>

extern char** environ;  // NOLINT: POSIX declares it nowhere else

namespace cudapmr {
namespace {

int status_of(int raw) noexcept {
  if (WIFEXITED(raw)) return WEXITSTATUS(raw);
  if (WIFSIGNALED(raw)) return 128 + WTERMSIG(raw);
  return raw;
}

/// waitpid, retried when a signal interrupts it.
pid_t wait_for_change(pid_t id, int& raw, int options) noexcept {
  pid_t result = 0;
  do {
    result = ::waitpid(id, &raw, options);
  } while (result < 0 && errno == EINTR);
  return result;
}

[[noreturn]] void throw_moved_from(const char* function) {
  throw std::logic_error(fmt::format("child_process::{} on a handle that was moved from: it owns no process", function));
}

[[noreturn]] void throw_wait_error(pid_t id) {
  throw std::system_error(errno, std::generic_category(), fmt::format("waiting for process {}", id));
}

}  // namespace

child_process::child_process(const std::filesystem::path& program, const std::vector<std::string>& arguments) {
  std::vector<std::string> storage;
  storage.reserve(arguments.size() + 1);
  storage.push_back(program.string());
  storage.insert(storage.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  argv.reserve(storage.size() + 1);
  for (std::string& argument : storage) argv.push_back(argument.data());
  argv.push_back(nullptr);
  if (const int error = posix_spawn(&id_, storage.front().c_str(), nullptr, nullptr, argv.data(), environ);
      error != 0) {
    id_ = -1;
    throw std::system_error(error, std::generic_category(), fmt::format("starting {}", program.string()));
  }
}

child_process::~child_process() {
  if (id_ > 0 && !status_) {
    kill(SIGKILL);
    reap();
  }
}

child_process::child_process(child_process&& other) noexcept
    : id_(std::exchange(other.id_, -1)), status_(std::exchange(other.status_, std::nullopt)) {}

child_process& child_process::operator=(child_process&& other) noexcept {
  if (this != &other) {
    if (id_ > 0 && !status_) {
      kill(SIGKILL);
      reap();
    }
    id_ = std::exchange(other.id_, -1);
    status_ = std::exchange(other.status_, std::nullopt);
  }
  return *this;
}

void child_process::reap() noexcept {
  int raw = 0;
  if (wait_for_change(id_, raw, 0) == id_) status_ = status_of(raw);
}

int child_process::wait() {
  if (status_) return *status_;
  if (id_ <= 0) throw_moved_from("wait");  // waitpid(-1) would reap some other child
  int raw = 0;
  if (wait_for_change(id_, raw, 0) != id_) throw_wait_error(id_);
  status_ = status_of(raw);
  return *status_;
}

std::optional<int> child_process::try_wait() {
  if (status_) return status_;
  if (id_ <= 0) throw_moved_from("try_wait");
  int raw = 0;
  const pid_t result = wait_for_change(id_, raw, WNOHANG);
  if (result < 0) throw_wait_error(id_);
  if (result == id_) status_ = status_of(raw);
  return status_;
}

std::optional<int> child_process::wait_for(std::chrono::milliseconds timeout) {
  // waitpid has no timeout; a short poll is plenty for tests and launchers.
  const auto deadline = detail::deadline_after(timeout);
  for (;;) {
    if (const std::optional<int> status = try_wait()) return status;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void child_process::kill(int signal) noexcept {
  if (id_ > 0 && !status_) static_cast<void>(::kill(id_, signal));
}

std::filesystem::path current_executable() {
  std::error_code error;
  std::filesystem::path path = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) throw std::system_error(error, "reading /proc/self/exe");
  return path;
}

}  // namespace cudapmr
