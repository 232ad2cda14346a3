// ChildProcess: a real child process for the end-to-end tests (a store writer that is
// killed, a process committing while another reads), started with posix_spawn and its
// stdout read through a pipe. Killed and reaped when the object goes away.
//
// Thread-safety: one thread at a time.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

extern char** environ;

namespace cohort::testing {

class ChildProcess {
 public:
  ChildProcess() = default;
  ~ChildProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      (void)Wait();
    }
    if (stdout_fd_ >= 0) ::close(stdout_fd_);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Starts args[0] (a path) with args; its stdout goes to a pipe this object reads.
  Status Start(const std::vector<std::string>& args) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return Status::FromErrno("pipe", errno);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    std::vector<char*> argv;
    for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    int rc = ::posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    if (rc != 0) {
      ::close(fds[0]);
      pid_ = -1;
      return Status::FromErrno("spawn " + args[0], rc);
    }
    stdout_fd_ = fds[0];
    return Status::OK();
  }

  void Kill() { ::kill(pid_, SIGKILL); }

  // Waits for the child to end; returns its wait status.
  int Wait() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return status;
  }

  // The wait status once the child has ended; nullopt while it runs.
  std::optional<int> Poll() {
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r != pid_) return std::nullopt;
    pid_ = -1;
    return status;
  }

  // Reads the child's stdout until it holds a whole line; false at end of file first. What
  // was read stays in the output ReadOutput returns.
  bool WaitForLine() {
    char buf[4096];
    while (read_.find('\n') == std::string::npos) {
      ssize_t n = ::read(stdout_fd_, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      read_.append(buf, static_cast<size_t>(n));
    }
    return true;
  }

  // Everything the child wrote to stdout, up to end of file.
  std::string ReadOutput() {
    std::string out = std::move(read_);
    read_.clear();
    char buf[4096];
    for (;;) {
      ssize_t n = ::read(stdout_fd_, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }

 private:
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::string read_;  // read by WaitForLine, not yet returned by ReadOutput
};

}  // namespace cohort::testing
