// LocalProcessHost: the ProcessHost that runs processes on this machine, through the
// launcher's SubprocessSet (posix_spawn from an argv, a process group each, one ppoll loop,
// SIGINT/SIGTERM counted as interrupts). launch/subprocess.h describes what that gives.
//
// Thread-safety: not thread-safe; one per process (it owns the process's SubprocessSet).
#pragma once

#include <chrono>
#include <map>
#include <memory>

#include "launch/process_host.h"

namespace cohort::launch {

class LocalProcessHost : public ProcessHost {
 public:
  // `kill_grace`: time between SIGTERM and SIGKILL.
  static Result<std::unique_ptr<LocalProcessHost>> Create(std::chrono::milliseconds kill_grace);

  Result<ProcessId> Start(const SpawnSpec& spec) override;
  Status Write(ProcessId process, std::string_view line) override;
  void CloseStdin(ProcessId process) override;
  void Terminate(ProcessId process) override;
  void Kill(ProcessId process) override;
  int64_t Pid(ProcessId process) const override;
  std::string Name(ProcessId process) const override;
  Result<int> Poll(std::chrono::milliseconds timeout, Listener& listener) override;
  size_t live() const override { return set_->size(); }
  Clock::time_point Now() const override { return Clock::now(); }

  // Changes a running process's heartbeat timeout (0: none), counted from its last output line.
  void SetHeartbeatTimeout(ProcessId process, std::chrono::milliseconds timeout);

 private:
  class Adapter;
  explicit LocalProcessHost(std::unique_ptr<SubprocessSet> set) : set_(std::move(set)) {}
  Subprocess* Find(ProcessId process) const;

  std::unique_ptr<SubprocessSet> set_;
  // The set deletes a child right after its OnExit: the maps forget it in the same call.
  std::map<ProcessId, Subprocess*> by_id_;
  std::map<const Subprocess*, ProcessId> ids_;
  ProcessId next_id_ = 1;
};

}  // namespace cohort::launch
