// FakeProcessHost: a ProcessHost for unit tests that runs no process. Each started "process" is
// a Program object the test's factory makes from the spawn spec; it answers the lines written
// to it by scheduling output, exits and crashes on a virtual clock. Poll() advances that clock
// straight to the next thing due, so a test of heartbeat timeouts, attempt timeouts, retries
// and interrupts runs in microseconds and the same way every time.
//
// What the host enforces like the local one: the spec's heartbeat timeout (no output line for
// that long: SIGTERM, reported as kKilledForHeartbeat) and wall-clock limit, Terminate() (the
// program's OnTerminate decides; by default it dies of SIGTERM at once; a program that ignores
// it gets SIGKILL after the kill grace), Kill() (SIGKILL at once), and exits reported once,
// after the output scheduled before them.
//
// Thread-safety: not thread-safe; one test thread.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "launch/process_host.h"

namespace cohort::launch {

class FakeProcessHost : public ProcessHost {
 public:
  using Duration = std::chrono::milliseconds;
  class Process;

  // What a fake process does. Each hook may schedule output, an exit or anything else.
  class Program {
   public:
    virtual ~Program() = default;
    virtual void OnStart(Process& process) {}
    virtual void OnLine(Process& process, const std::string& line) {}
    // Default: exits 0 at once, as a worker does when its stdin closes.
    virtual void OnStdinClosed(Process& process);
    // SIGTERM. Default: dies of it at once.
    virtual void OnTerminate(Process& process);
  };

  // The handle a Program acts through. Delays are virtual time from now.
  class Process {
   public:
    const SpawnSpec& spec() const { return spec_; }
    ProcessId id() const { return id_; }
    int64_t pid() const { return pid_; }
    FakeProcessHost& host() { return *host_; }
    void Event(nlohmann::json event, Duration delay = Duration(0));
    void Log(std::string line, Duration delay = Duration(0));
    // Ends by itself: exit status `code`, or a signal it did not get from the host (a crash).
    void Exit(int code, Duration delay = Duration(0));
    void Crash(int signal, Duration delay = Duration(0));
    void CloseStdout(Duration delay = Duration(0));
    // Runs `action` after `delay`, unless the process has ended by then.
    void After(Duration delay, std::function<void()> action);

   private:
    friend class FakeProcessHost;
    FakeProcessHost* host_ = nullptr;
    ProcessId id_ = 0;
    int64_t pid_ = 0;
    SpawnSpec spec_;
    std::unique_ptr<Program> program_;
    Clock::time_point started_;
    Clock::time_point last_output_;
    bool stdin_open_ = true;
    bool stdout_open_ = true;
    bool ending_ = false;  // an exit is scheduled and nothing else runs
    // Termination under way: why, and when SIGKILL follows.
    std::optional<ExitReason> terminating_;
    Clock::time_point kill_at_;
  };

  // Makes the program for a spawn spec; nullptr means "cannot be started" (Start fails).
  using Factory = std::function<std::unique_ptr<Program>(const SpawnSpec&)>;

  explicit FakeProcessHost(Factory factory, Duration kill_grace = Duration(5000));
  ~FakeProcessHost() override;

  // An interrupt (Ctrl-C) at this virtual time since the host was made.
  void InterruptAt(Duration at);
  // Every spec Start() was given, in order.
  const std::vector<SpawnSpec>& started() const { return started_; }
  // Virtual time since the host was made.
  Duration elapsed() const;
  // The live process with this id, or null.
  Process* Find(ProcessId process);

  Result<ProcessId> Start(const SpawnSpec& spec) override;
  Status Write(ProcessId process, std::string_view line) override;
  void CloseStdin(ProcessId process) override;
  void Terminate(ProcessId process) override;
  void Kill(ProcessId process) override;
  int64_t Pid(ProcessId process) const override;
  std::string Name(ProcessId process) const override;
  Result<int> Poll(std::chrono::milliseconds timeout, Listener& listener) override;
  size_t live() const override { return processes_.size(); }
  Clock::time_point Now() const override { return now_; }

 private:
  // Something due at a virtual time: output, an exit, a program action, an interrupt.
  struct Action {
    ProcessId process = 0;  // 0: not about a process (an interrupt)
    std::function<void(Listener&)> run;
  };
  void Schedule(ProcessId process, Duration delay, std::function<void(Listener&)> run);
  // Schedules the end of `p` now (or after `delay`), dropping whatever else it had scheduled.
  void End(Process& p, ExitInfo info, Duration delay = Duration(0));
  void Deliver(Process& p, Listener& listener, const std::function<void(Listener&)>& run);
  Clock::time_point NextDeadline(const Process& p) const;
  void EnforceDeadlines();

  Factory factory_;
  Duration kill_grace_;
  Clock::time_point start_;
  Clock::time_point now_;
  std::map<ProcessId, std::unique_ptr<Process>> processes_;
  std::multimap<std::pair<Clock::time_point, uint64_t>, Action> actions_;
  uint64_t sequence_ = 0;
  ProcessId next_id_ = 1;
  int64_t next_pid_ = 1000;
  int pending_interrupts_ = 0;
  std::vector<SpawnSpec> started_;
};

}  // namespace cohort::launch
