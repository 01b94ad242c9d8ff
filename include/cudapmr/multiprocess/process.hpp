// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file process.hpp
/// Child processes for multi-process work: start a program, wait for it, stop it.

#include <sys/types.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace cudapmr {

/// A child process running a program with the caller's environment. Move-only.
/// A child still running when its owner is destroyed is killed and reaped, so
/// that a failing parent leaves no process behind.
class child_process final {
 public:
  /// Starts `program` with `arguments` as argv[1] onwards.
  /// \throws std::system_error naming the program when it cannot be started.
  child_process(const std::filesystem::path& program, const std::vector<std::string>& arguments);
  /// Kills (SIGKILL) and reaps a child that is still running. Never throws.
  ~child_process();

  child_process(child_process&& other) noexcept;
  child_process& operator=(child_process&& other) noexcept;
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  /// The process id; -1 once moved from.
  [[nodiscard]] pid_t id() const noexcept { return id_; }

  /// Blocks until the child has ended and returns its exit status, or 128 plus
  /// the number of the signal that ended it, as shells report it.
  /// \throws std::system_error where waiting fails; std::logic_error on a
  ///   moved-from handle (it owns no process, and waits for no other child).
  int wait();
  /// The exit status (as `wait` gives it) if the child has ended; never blocks.
  /// \throws as `wait`.
  [[nodiscard]] std::optional<int> try_wait();
  /// Waits at most `timeout` (`milliseconds::max()`: with no limit) for the
  /// child to end; nullopt if it is still running.
  /// \throws as `wait`.
  [[nodiscard]] std::optional<int> wait_for(std::chrono::milliseconds timeout);
  /// Sends `signal` to the child if it is still running. Never throws.
  void kill(int signal = SIGKILL) noexcept;

 private:
  void reap() noexcept;

  pid_t id_ = -1;
  std::optional<int> status_;
};

/// The path of the running program, e.g. to start another copy of it.
/// \throws std::system_error where it cannot be read (/proc/self/exe).
[[nodiscard]] std::filesystem::path current_executable();

}  // namespace cudapmr
