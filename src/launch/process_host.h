// ProcessHost: where the loop's processes run, behind one interface.
//
// The Scheduler starts workers, outside-script members and the command oracle through a
// ProcessHost, writes command lines to them, stops them, and learns what they did from one
// Poll() that hands their events, log lines and exits to a Listener, as ninja's Builder drives
// a CommandRunner. LocalProcessHost (local_process_host.h) runs them on this machine through
// SubprocessSet; a cluster host would start them with srun; FakeProcessHost
// (fake_process_host.h) plays scripted processes in virtual time for unit tests.
//
// A process is named by the ProcessId Start() returns, never reused by the host. Deadlines in
// the spec (heartbeat timeout, wall-clock limit) are the host's to enforce, and its clock is
// Now(): the scheduler measures attempts and its own timeouts with it, so a fake host's virtual
// clock drives every timeout there is. Calls that name a process already reported through
// OnExit do nothing (Write returns an error).
//
// Thread-safety: not thread-safe; used by the controller thread only. At most one host that
// handles signals (the local one) exists per process.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"
#include "launch/subprocess.h"

namespace cohort::launch {

using ProcessId = uint64_t;

class ProcessHost {
 public:
  // What Poll() reports, through calls made from inside Poll(). A callback may call Start(),
  // Write(), Terminate() and Kill().
  class Listener {
   public:
    virtual ~Listener() = default;
    // A `@cohort {...}` stdout line whose JSON is an object.
    virtual void OnEvent(ProcessId process, nlohmann::json event) = 0;
    // Every other stdout line.
    virtual void OnLog(ProcessId process, std::string_view line) = 0;
    // Its stdout closed while it still runs: it can no longer report.
    virtual void OnStdoutClosed(ProcessId process) {}
    // Once per process, after all of its output was delivered.
    virtual void OnExit(ProcessId process, const ExitInfo& info) = 0;
  };

  virtual ~ProcessHost() = default;

  // Starts a process. Errors name the program when it cannot be started.
  virtual Result<ProcessId> Start(const SpawnSpec& spec) = 0;
  // Starts a process on the controller's own machine, whatever the host (the command oracle).
  virtual Result<ProcessId> StartHere(const SpawnSpec& spec) { return Start(spec); }
  // Queues one line for its stdin; errors when its stdin is closed or it is gone.
  virtual Status Write(ProcessId process, std::string_view line) = 0;
  // Closes its stdin once what is queued is written ("stop now" for a worker).
  virtual void CloseStdin(ProcessId process) = 0;
  // Asks it to stop (SIGTERM, then SIGKILL after the host's grace).
  virtual void Terminate(ProcessId process) = 0;
  // Stops it at once (SIGKILL).
  virtual void Kill(ProcessId process) = 0;
  // The operating system's pid, for the journal and messages.
  virtual int64_t Pid(ProcessId process) const = 0;
  // "cohort-member[4242]", for messages.
  virtual std::string Name(ProcessId process) const = 0;

  // Waits until something happened or `timeout` passed (negative: no limit), reports it through
  // `listener`, and returns the interrupts (SIGINT/SIGTERM to the controller) seen meanwhile.
  virtual Result<int> Poll(std::chrono::milliseconds timeout, Listener& listener) = 0;
  // Processes not yet reported through OnExit.
  virtual size_t live() const = 0;
  // The host's clock.
  virtual Clock::time_point Now() const = 0;
};

}  // namespace cohort::launch
