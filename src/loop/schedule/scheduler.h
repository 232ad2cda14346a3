// Scheduler: trains a round's members on the run's devices, one persistent worker per slot.
//
// A slot is one place a member can train: each device has members_per_device slots, and each
// slot keeps one `cohort worker` process (docs/protocol.md) alive across members and rounds,
// so a member costs no process start-up once its slot's worker runs. A member's attempt on a
// slot is three worker commands in a row: train on the round's generation, predict the pool,
// predict the test table. Members wait in a queue for a free slot, in the order the
// controller gives (config order in round 0, then longest first by the previous round).
//
// Failures: a worker that exits, closes its stdout, goes silent past the heartbeat timeout,
// or runs one attempt past the attempt timeout is killed (SIGTERM to its process group, then
// SIGKILL) and its slot gets a fresh worker; a worker that answers a command with an error
// event stays up and serves the retry (the error was the member's, not the process's). Either way
// the attempt is journalled as failed or killed and the member is queued again while it has
// attempts left; other members are never held up by it.
//
// Interrupts (SIGINT/SIGTERM, seen through the launcher): the first is reported to the caller,
// which finishes the round; the second kills every worker at once and ends the phase with
// status Aborted. The journal records every attempt's start (with its pid) before the worker
// gets the command, and its end, so a controller killed at any point can be resumed.
//
// The Scheduler starts and stops processes through a launch::ProcessHost (local, or a fake in unit
// tests) and measures time by the host's clock; it reports progress to a ProgressObserver and
// never draws anything itself. The worker protocol's commands and events are worker_client.h's,
// the outside-script contract is script_member.h's; this file keeps the slots, the queue and
// the attempts.
//
// Thread-safety: used by the controller thread only; the host and observer must outlive it.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "launch/device.h"
#include "launch/process_host.h"
#include "launch/subprocess.h"
#include "loop/config/config.h"
#include "loop/ensemble/predictions.h"
#include "loop/run/journal.h"
#include "loop/run/run_dir.h"
#include "loop/schedule/progress.h"

namespace cohort::loop {

struct SchedulerOptions {
  std::vector<launch::Device> devices;
  int threads_per_cpu_device = 1;
  int members_per_device = 1;
  int cpu_count = 1;
  std::string member_binary;  // the `cohort-member` executable
  std::chrono::milliseconds heartbeat_timeout{60000};
  std::chrono::milliseconds attempt_timeout{0};  // 0: none
  uint64_t memory_limit_bytes = 0;  // each worker's and script's address space; 0: none
  // A worker's or script's log past this is rotated: its content moves to LOG.1 (replacing the
  // older one) and the log starts again empty. 0: no cap.
  uint64_t log_limit_bytes = uint64_t{64} << 20;
  // How long KillAll waits for killed processes to be reported, beyond the host's grace.
  std::chrono::milliseconds kill_grace{5000};
  // How often RunRound polls when nothing happens (display refresh, deadlines).
  std::chrono::milliseconds poll_interval{250};
};

// One member to train this round.
struct MemberTask {
  size_t index = 0;  // into the config's members
  const MemberConfig* member = nullptr;
  std::string warm_start_from;  // absolute checkpoint path, or empty
  int next_attempt = 1;         // the attempt number to use first
  int attempts_left = 1;        // tries this phase may still make
  // False in a round known to be the last (nothing will be acquired after it): a native
  // member then skips predicting the pool, often the largest table. Scripts always do it.
  bool predict_pool = true;
  // True when an update step reads the members' predictions of the train table
  // (relabel_or_drop, a command step with predict = ["train"]); false in a known last round.
  bool predict_train = false;
};

// A member's outcome in a round.
struct MemberResult {
  bool done = false;
  int attempt = 0;
  std::string checkpoint;        // relative to the run directory
  std::string predictions_pool;  // empty when the round did not predict the pool
  std::string predictions_test;
  std::string predictions_train;  // empty unless the round's update steps read it
  double train_seconds = 0;       // the worker's training loop
  double predict_seconds = 0;     // both predictions, as the controller saw them
  std::string error;              // the last failure, when not done
};

struct PhaseStats {
  double wall_s = 0;
  double predict_s = 0;  // summed over members
  double idle_s = 0;     // slot-seconds without an attempt running a command
};

class Scheduler {
 public:
  static Result<std::unique_ptr<Scheduler>> Create(const SchedulerOptions& options,
                                                   const RunPaths& paths, Journal* journal,
                                                   int64_t run_id, launch::ProcessHost* host,
                                                   ProgressObserver* observer);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Runs `tasks` for `round` on `generation` until each member is done or out of attempts.
  // `results` is indexed like the config's members; members without a task keep theirs.
  // Every attempt's prediction files are checked against `shape` (the tables' sizes at
  // `generation`, the run's class count) when it ends: a bad file fails the attempt. Aborted
  // after a second interrupt (workers killed, attempts journalled as interrupted).
  Status RunRound(int64_t round, uint64_t generation, const LoopConfig& config,
                  const PredictionShape& shape, std::vector<MemberTask> tasks,
                  std::vector<MemberResult>* results, PhaseStats* stats);

  // Runs one outside program to completion (the command oracle) while the workers keep being
  // served. Aborted after a second interrupt (the program is killed).
  Result<launch::ExitInfo> RunProgram(const launch::SpawnSpec& spec);

  // Interrupts (Ctrl-C, SIGTERM) received since Create().
  int interrupts() const { return interrupts_; }
  // Serves the workers without waiting (signals arrive only inside a poll) and returns
  // interrupts().
  int PollSignals();

  // Asks idle workers to exit and waits up to `grace` for them; kills the rest.
  void Shutdown(std::chrono::milliseconds grace);

 private:
  struct Slot;
  struct Attempt;
  class Listener;
  Scheduler(SchedulerOptions options, RunPaths paths, Journal* journal, int64_t run_id,
            launch::ProcessHost* host, ProgressObserver* observer);

  Slot* WorkerSlot(launch::ProcessId process);
  Slot* ScriptSlot(launch::ProcessId process);
  AttemptRef RefOf(const Slot& slot) const;
  void StartQueuedAttempts();
  Status StartAttempt(Slot& slot, MemberTask task);
  // Journals the slot's attempt as started (its id is the journal's) and reports it.
  Status JournalStart(Slot& slot, int64_t pid, const std::string& log_path);
  // Journals where the slot's worker runs (its hello's host and GPUs) for its attempt.
  Status JournalPlacement(const Slot& slot);
  Status StartNativeAttempt(Slot& slot);
  Status StartScript(Slot& slot);
  Status SpawnWorker(Slot& slot);
  Status SendNext(Slot& slot);
  // The worker protocol's events, for a slot's worker or a script attempt.
  void OnWorkerEvent(Slot& slot, const nlohmann::json& event);
  void OnScriptEvent(Slot& slot, nlohmann::json event);
  // A failure's words, with the memory limit named when there is one (and said to be the
  // cause when the words show an allocation failed).
  std::string WithMemoryLimit(const std::string& why) const;
  void OnWorkerExit(Slot& slot, const launch::ExitInfo& info);
  void OnScriptExit(Slot& slot, const launch::ExitInfo& info);
  void ShowProgress(const Slot& slot, const nlohmann::json& event);
  void RecordEpochs(const Attempt& attempt);
  // Ends the slot's attempt; requeues its task when it failed and has attempts left.
  void EndAttempt(Slot& slot, AttemptStatus status, const std::string& exit);
  // `worker_torch`: the libtorch version the slot's worker named in its hello ("" for none).
  void RecordResult(const Attempt& attempt, AttemptStatus status, const std::string& exit,
                    launch::Clock::time_point now, const std::string& worker_torch,
                    AttemptEnd* end);
  void CopyAttemptLog(const Slot& slot, const Attempt& attempt);
  void AppendLog(const std::string& path, std::string_view line);
  Status PollOnce(std::chrono::milliseconds timeout);
  void CheckDeadlines();
  // Rotates the logs of running workers and scripts that passed log_limit_bytes (checked about
  // once a second).
  void CapLogs();
  void RotateLog(const std::string& path);
  void KillAll(const std::string& why);
  double SecondsSince(launch::Clock::time_point t) const;

  SchedulerOptions options_;
  RunPaths paths_;
  Journal* journal_;
  int64_t run_id_;
  launch::ProcessHost* host_;
  ProgressObserver* observer_;
  std::vector<std::unique_ptr<Slot>> slots_;
  int interrupts_ = 0;
  int worker_logs_ = 0;  // worker processes started, for unique log names
  launch::Clock::time_point next_log_check_{};
  Status fatal_;                 // a journal write that failed inside a callback
  std::string kill_all_reason_;  // while KillAll runs: why every attempt ends

  // The round being run.
  int64_t round_ = 0;
  uint64_t generation_ = 0;
  const LoopConfig* config_ = nullptr;
  std::vector<MemberTask> queue_;
  std::vector<MemberResult>* results_ = nullptr;
  PhaseStats* stats_ = nullptr;
  PredictionShape shape_;

  // RunProgram's child, while it runs, and where its stdout goes.
  std::optional<launch::ProcessId> program_;
  std::string program_log_;
  std::optional<launch::ExitInfo> program_exit_;

  // Log files kept open across lines (closed when the round's attempt ends).
  std::map<std::string, std::unique_ptr<std::FILE, int (*)(std::FILE*)>> open_logs_;
};

}  // namespace cohort::loop
