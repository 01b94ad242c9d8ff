// SPDX-License-Identifier: Apache-2.0
// child_process: start, wait, stop. Host-only.
#include <cudapmr/multiprocess/process.hpp>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <stdexcept>
#include <string>
#include <system_error>

namespace cudapmr {
namespace {

bool process_exists(pid_t id) { return ::kill(id, 0) == 0 || errno != ESRCH; }

TEST(ChildProcess, ReportsTheExitStatus) {
  child_process child("/bin/sh", {"-c", "exit 3"});
  EXPECT_GT(child.id(), 0);
  EXPECT_EQ(child.wait(), 3);
  EXPECT_EQ(child.wait(), 3) << "a second wait gives the same status";
}

TEST(ChildProcess, ReportsASignalAs128PlusItsNumber) {
  child_process child("/bin/sh", {"-c", "kill -TERM $$"});
  EXPECT_EQ(child.wait(), 128 + SIGTERM);
}

TEST(ChildProcess, PassesArgumentsVerbatim) {
  child_process child("/bin/sh", {"-c", R"(test "$1" = "two words" && test -z "$2" && test "$3" = '$HOME')", "sh",
                                  "two words", "", "$HOME"});
  EXPECT_EQ(child.wait(), 0);
}

TEST(ChildProcess, TryWaitAndWaitForDoNotBlockOnARunningChild) {
  child_process child("/bin/sleep", {"30"});
  EXPECT_EQ(child.try_wait(), std::nullopt);
  EXPECT_EQ(child.wait_for(std::chrono::milliseconds(20)), std::nullopt);
  child.kill(SIGKILL);
  EXPECT_EQ(child.wait(), 128 + SIGKILL);
  EXPECT_EQ(child.try_wait(), 128 + SIGKILL);
}

TEST(ChildProcess, WaitForWithTheLongestTimeoutWaitsForTheChild) {
  child_process child("/bin/sh", {"-c", "sleep 0.1; exit 4"});
  EXPECT_EQ(child.wait_for(std::chrono::milliseconds::max()), 4) << "the deadline overflowed into the past";
}

TEST(ChildProcess, DestroyingARunningChildKillsAndReapsIt) {
  pid_t id = -1;
  {
    const child_process child("/bin/sleep", {"30"});
    id = child.id();
    EXPECT_TRUE(process_exists(id));
  }
  EXPECT_FALSE(process_exists(id)) << "process " << id << " outlived its owner";
}

TEST(ChildProcess, MovingHandsOverTheChild) {
  child_process first("/bin/sh", {"-c", "exit 7"});
  const pid_t id = first.id();
  child_process second(std::move(first));
  EXPECT_EQ(first.id(), -1);  // NOLINT(bugprone-use-after-move): moved-from state is specified
  EXPECT_EQ(second.id(), id);
  EXPECT_EQ(second.wait(), 7);
}

TEST(ChildProcess, WaitingOnAMovedFromHandleIsRefusedAndReapsNoOtherChild) {
  child_process bystander("/bin/sh", {"-c", "exit 3"});  // must stay its owner's to reap
  child_process first("/bin/sh", {"-c", "exit 7"});
  child_process second(std::move(first));
  try {
    static_cast<void>(first.wait());  // NOLINT(bugprone-use-after-move): the case under test
    ADD_FAILURE() << "wait() on a moved-from handle returned";
  } catch (const std::logic_error& error) {
    EXPECT_NE(std::string(error.what()).find("moved from"), std::string::npos) << error.what();
  }
  EXPECT_THROW(static_cast<void>(first.try_wait()), std::logic_error);  // NOLINT(bugprone-use-after-move)
  EXPECT_THROW(static_cast<void>(first.wait_for(std::chrono::milliseconds(1))), std::logic_error);  // NOLINT
  EXPECT_EQ(bystander.wait(), 3);
  EXPECT_EQ(second.wait(), 7);
}

TEST(ChildProcess, AProgramThatDoesNotExistIsRefusedByName) {
  try {
    child_process child("/nonexistent/cudapmr-program", {});
    ADD_FAILURE() << "started process " << child.id();
  } catch (const std::system_error& error) {
    EXPECT_EQ(error.code(), std::errc::no_such_file_or_directory);
    EXPECT_NE(std::string(error.what()).find("/nonexistent/cudapmr-program"), std::string::npos) << error.what();
  }
}

TEST(ChildProcess, CurrentExecutableIsThisProgram) {
  EXPECT_EQ(current_executable().filename(), "cudapmr_multiprocess_tests");
}

}  // namespace
}  // namespace cudapmr
