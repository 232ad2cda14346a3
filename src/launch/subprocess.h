// Subprocess and SubprocessSet: starting child processes (workers, outside-script members) and
// serving all of their pipes from one event loop.
//
// A child is started with posix_spawn from an argv (never a shell), in a process group of its
// own, with its stdin a pipe the controller writes commands to, its stdout a pipe the set
// reads, and its stderr appended to a log file. Every descriptor the set holds is close-on-exec,
// so no child ever inherits another child's pipes. Signals to a child go to its whole group, so
// whatever it started (a shell's children, data-loader processes) goes with it.
//
// SubprocessSet::Poll() is the loop: one ppoll() over every child's stdout plus a self-pipe
// that the SIGCHLD/SIGINT/SIGTERM handler writes to. It splits stdout into lines and hands
// them to a Handler: `@cohort {...}` lines that parse as a JSON object as events, everything
// else as log (docs/protocol.md, "Framing"). It enforces per-child deadlines (a heartbeat
// timeout between output lines, a wall-clock limit) by SIGTERM to the group and SIGKILL after a
// grace period, and reports each child's end exactly once, after its stdout has been read to
// the end and it has been reaped, so no output is ever lost.
//
// Signals: SIGCHLD, SIGINT and SIGTERM are blocked in the thread that creates the set for the
// set's lifetime and unblocked only inside ppoll(); SIGPIPE is ignored (a write to a child that
// is gone returns EPIPE). SIGINT/SIGTERM do not kill the controller: Poll() reports them as an
// interrupt count, so the controller can do "Ctrl-C once: finish the round; twice: kill".
// Children get all of these signals back at their defaults and an empty signal mask.
//
// Thread-safety: not thread-safe. One SubprocessSet per process (Create() refuses a second),
// used from the thread that created it. Other threads in the process should block SIGCHLD,
// SIGINT and SIGTERM (create them after the set, and they inherit the mask); if they do not,
// the handler still wakes Poll() through the self-pipe.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/file_util.h"
#include "common/status.h"

namespace cohort::launch {

using Clock = std::chrono::steady_clock;

// What to start and how.
struct SpawnSpec {
  // argv[0] is the program: a path if it contains '/', else looked up on PATH (the one set in
  // `env` when there is one, else the controller's).
  std::vector<std::string> argv;
  // Variables set (or overridden) on top of the parent's environment.
  std::vector<std::pair<std::string, std::string>> env;
  // The child's stderr is appended to this file (created 0644); empty: inherit the parent's.
  std::string stderr_path;
  // The child's working directory; empty: the parent's. A relative argv[0] is resolved there.
  std::string cwd;
  // Longest time between two complete stdout lines before the child is killed; 0: no limit.
  std::chrono::milliseconds heartbeat_timeout{0};
  // Longest time since the spawn before the child is killed; 0: no limit.
  std::chrono::milliseconds wall_clock_limit{0};
  // The child's address-space limit (RLIMIT_AS, set right after the spawn, inherited by what
  // it starts); an allocation past it fails inside the child. 0: no limit.
  uint64_t memory_limit_bytes = 0;
};

// Why a child ended.
enum class ExitReason {
  kExited,              // it exited by itself (exit_code says how)
  kSignalled,           // a signal it did not get from us ended it (signal says which)
  kKilledForHeartbeat,  // no output line for longer than its heartbeat timeout
  kKilledForWallClock,  // it ran longer than its wall-clock limit
  kKilledByRequest,     // the controller called Terminate() or Kill()
};
const char* ExitReasonName(ExitReason reason);

struct ExitInfo {
  ExitReason reason = ExitReason::kExited;
  int exit_code = -1;  // the exit status when it exited by itself, else -1
  int signal = 0;      // the signal that ended it, else 0
  // True when its stdout was still held open (by a process that left its group) after the
  // group was killed, and the set stopped reading: output after that point is lost.
  bool output_cut = false;
  // The heartbeat timeout or wall-clock limit that was exceeded, for those reasons.
  std::chrono::milliseconds limit{0};
  Clock::duration run_time{};  // from spawn to the moment the exit was seen
  // What the process host knows beyond the exit status (a cluster's reason: a time limit, a
  // node failure, a step that never started); ToString appends it after ": ".
  std::string detail;
  // "exited with status 3", "killed by signal 11 (Segmentation fault)",
  // "killed: no output for 2.0 s (heartbeat timeout), then signal 9 (Killed)".
  std::string ToString() const;
};

class SubprocessSet;

// One child process. Created by SubprocessSet::Spawn() and owned by the set, which deletes it
// right after Handler::OnExit() returns: do not keep the pointer past that call.
class Subprocess {
 public:
  enum class State { kRunning, kExited, kSignalled };

  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  ~Subprocess();

  pid_t pid() const { return pid_; }
  // argv[0] and the pid, for messages: "cohort-member[4242]".
  const std::string& name() const { return name_; }

  // Queues `line` (plus '\n' when it does not end in one) for the child's stdin and writes as
  // much as the pipe takes now, without blocking; Poll() writes the rest when the pipe drains,
  // so a line is never split by a full pipe. Errors: stdin closed (CloseStdin, or the child
  // closed its end: EPIPE), or more than SubprocessSet::Options::max_pending_input bytes
  // already waiting (the child is not reading). A failed Write queues nothing.
  Status Write(std::string_view line);
  // Closes the child's stdin once everything queued has been written (at once if nothing is):
  // for a worker this means "stop now" (docs/protocol.md, "Exit behaviour").
  void CloseStdin();
  // Bytes queued for stdin that the pipe has not taken yet.
  size_t pending_input() const { return pending_input_.size() - pending_offset_; }

  // SIGTERM to the child's process group; the set sends SIGKILL if the child has not exited
  // after the kill grace. The ExitInfo then says kKilledByRequest. Repeated calls do nothing.
  Status Terminate();
  // SIGKILL to the child's process group at once. The ExitInfo says kKilledByRequest.
  Status Kill();

  State state() const { return state_; }
  bool running() const { return state_ == State::kRunning; }
  int exit_code() const { return exit_code_; }      // when kExited
  int term_signal() const { return term_signal_; }  // when kSignalled
  // The child's stdout has reached end of file (the child and all it started closed it).
  bool stdout_eof() const { return !stdout_fd_.valid(); }
  Clock::time_point start_time() const { return start_time_; }
  // When the last complete stdout line arrived (the spawn time before the first).
  Clock::time_point last_output_time() const { return last_output_time_; }

  // Deadlines may be changed at any time; 0 removes the limit. The heartbeat timeout counts
  // from the last output line, the wall-clock limit from the spawn.
  void set_heartbeat_timeout(std::chrono::milliseconds timeout) { heartbeat_timeout_ = timeout; }
  void set_wall_clock_limit(std::chrono::milliseconds limit) { wall_clock_limit_ = limit; }
  std::chrono::milliseconds heartbeat_timeout() const { return heartbeat_timeout_; }
  std::chrono::milliseconds wall_clock_limit() const { return wall_clock_limit_; }

 private:
  friend class SubprocessSet;
  Subprocess(SubprocessSet* set, pid_t pid, std::string name, ScopedFd stdin_fd,
             ScopedFd stdout_fd);

  Status SignalGroup(int sig);
  // Notes an exit without reaping (waitid WNOWAIT): the zombie keeps the pid, and so the
  // process group id, from being reused until SubprocessSet::Reap().
  void ObserveExit();
  // Starts SIGTERM-then-SIGKILL for `reason` unless a kill is already under way.
  void BeginTermination(ExitReason reason, Clock::time_point now);
  Status FlushInput();  // writes queued stdin bytes until the pipe is full
  void CloseStdinNow();
  void CloseStdout();

  SubprocessSet* set_;
  pid_t pid_;
  std::string name_;
  ScopedFd stdin_fd_;
  ScopedFd stdout_fd_;
  std::string pending_input_;
  size_t pending_offset_ = 0;
  bool close_stdin_after_flush_ = false;

  // Output line assembly.
  std::string partial_line_;
  size_t dropped_bytes_ = 0;  // bytes of the current over-long line beyond the cap

  State state_ = State::kRunning;
  int exit_code_ = -1;
  int term_signal_ = 0;
  bool exit_seen_ = false;  // it exited; it stays a zombie (holding its pid) until reaped
  bool reaped_ = false;
  bool finished_ = false;  // OnExit delivered; removed at the end of Poll()
  bool stdout_closed_reported_ = false;
  bool output_cut_ = false;
  Clock::time_point stdout_eof_time_;
  Clock::time_point force_close_time_;  // reaped, stdout still open: stop reading then
  Clock::time_point start_time_;
  Clock::time_point last_output_time_;
  Clock::time_point exit_time_;
  std::chrono::milliseconds heartbeat_timeout_{0};
  std::chrono::milliseconds wall_clock_limit_{0};

  // Termination: why, when SIGTERM went out, whether SIGKILL did.
  bool terminating_ = false;
  ExitReason kill_reason_ = ExitReason::kExited;
  Clock::time_point term_time_;
  bool kill_sent_ = false;
  Clock::time_point kill_time_;
};

// The event a stdout line carries: `@cohort {...}` (after a trailing "\r" is dropped) whose
// JSON parses as an object; nullopt for every other line, which is log. What SubprocessSet
// hands to Handler::OnEvent; free so it can be tested and fuzzed on its own (fuzz/).
std::optional<nlohmann::json> ParseEventLine(std::string_view line);

class SubprocessSet {
 public:
  struct Options {
    // Time between SIGTERM and SIGKILL; also how long the set keeps reading a child's stdout
    // after the child exited while something it started still holds the pipe open.
    std::chrono::milliseconds kill_grace{5000};
    // A stdout line longer than this is cut to this many bytes, with a marker naming the
    // length, and handed to OnLog.
    size_t max_line_bytes = size_t{16} << 20;
    // Write() refuses to queue more than this for one child's stdin.
    size_t max_pending_input = size_t{64} << 20;
    // When a child has exited, SIGKILL whatever is left of its process group before it is
    // reaped (so no orphan keeps a GPU or a file busy). The child's pid is still held by its
    // zombie at that point, so the signal cannot reach an unrelated process.
    bool kill_group_on_exit = true;
    // A child whose stdout reached end of file while it still runs is reported through
    // Handler::OnStdoutClosed when it is still running this long after (a child that closes
    // stdout and then exits normally is not reported).
    std::chrono::milliseconds stdout_closed_grace{1000};
  };

  // What Poll() reports, through virtual calls made from inside Poll().
  class Handler {
   public:
    virtual ~Handler() = default;
    // A `@cohort {...}` stdout line whose JSON is an object.
    virtual void OnEvent(Subprocess& child, nlohmann::json event) = 0;
    // Every other stdout line, without its "\n" or "\r\n".
    virtual void OnLog(Subprocess& child, std::string_view line) = 0;
    // The child's stdout reached end of file while the child still runs (it closed its pipe):
    // a worker that does so can no longer report, and the controller should kill it.
    virtual void OnStdoutClosed(Subprocess& child) {}
    // Once per child, after its stdout reached end of file and it was reaped. The set deletes
    // the child right after this returns.
    virtual void OnExit(Subprocess& child, const ExitInfo& info) = 0;
  };

  struct PollResult {
    // SIGINT/SIGTERM received by the controller since the previous Poll() returned.
    int interrupts = 0;
  };

  // Blocks SIGCHLD/SIGINT/SIGTERM in the calling thread, installs the handlers, ignores
  // SIGPIPE. Fails if another SubprocessSet exists in the process.
  static Result<std::unique_ptr<SubprocessSet>> Create(Options options);
  static Result<std::unique_ptr<SubprocessSet>> Create() { return Create(Options()); }

  SubprocessSet(const SubprocessSet&) = delete;
  SubprocessSet& operator=(const SubprocessSet&) = delete;
  // SIGKILLs every remaining child's group, reaps them (without calling any handler), then
  // restores the signal mask and handlers found at Create().
  ~SubprocessSet();

  // Starts a child. The error names the program when it cannot be run (missing, not
  // executable), the stderr file or the working directory when those fail.
  Result<Subprocess*> Spawn(const SpawnSpec& spec);

  // Waits until some child has output, has exited or has a deadline due, a signal arrives, or
  // `timeout` passes (a negative timeout: no limit), handles all of it through `handler`, and
  // returns. The handler may call Spawn(), Write(), Terminate() and Kill() from its callbacks;
  // children spawned there are polled from the next call.
  Result<PollResult> Poll(std::chrono::milliseconds timeout, Handler& handler);

  // Children not yet reported through OnExit.
  size_t size() const { return children_.size(); }
  bool empty() const { return children_.empty(); }
  const std::vector<std::unique_ptr<Subprocess>>& children() const { return children_; }
  const Options& options() const { return options_; }
  // SIGINT/SIGTERM received since Create().
  int total_interrupts() const;

 private:
  explicit SubprocessSet(Options options);
  Status Init();
  void ReadOutput(Subprocess& child, Handler& handler);
  void AddOutput(Subprocess& child, const char* data, size_t size, Handler& handler);
  void DeliverLine(Subprocess& child, Handler& handler);
  void Reap(Subprocess& child);
  Clock::time_point NextDeadline(const Subprocess& child) const;
  // Deadlines, draining, reaping and OnExit for one child, after its output was read.
  void Advance(Subprocess& child, Clock::time_point now, Handler& handler);

  Options options_;
  std::vector<std::unique_ptr<Subprocess>> children_;
  ScopedFd wake_read_fd_;  // the self-pipe the signal handler writes to
  ScopedFd wake_write_fd_;
  int interrupts_seen_ = 0;
  bool initialized_ = false;
  // The process state found at Create(), restored by the destructor.
  struct SavedSignals;
  std::unique_ptr<SavedSignals> saved_;
};

}  // namespace cohort::launch
