#include "loop/schedule/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>

#include "common/file_util.h"
#include "common/json_text.h"
#include "common/worker_protocol.h"
#include "loop/acquire/round_seeds.h"
#include "loop/schedule/script_member.h"
#include "loop/schedule/worker_client.h"

namespace cohort::loop {

namespace {

namespace fs = std::filesystem;
using launch::Clock;
using nlohmann::json;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The prediction a native attempt makes after `done` (kTrain: after training): the pool, then
// the train table, then the test table, each only when the task asks for it (test always).
WorkerStep NextPredictStep(const MemberTask& task, WorkerStep done) {
  if (done == WorkerStep::kTrain && task.predict_pool) return WorkerStep::kPredictPool;
  if ((done == WorkerStep::kTrain || done == WorkerStep::kPredictPool) && task.predict_train) {
    return WorkerStep::kPredictTrain;
  }
  return WorkerStep::kPredictTest;
}

bool KilledByUs(const launch::ExitInfo& info) {
  return info.reason != launch::ExitReason::kExited &&
         info.reason != launch::ExitReason::kSignalled;
}

}  // namespace

// A member's attempt on a slot.
struct Scheduler::Attempt {
  MemberTask task;
  int number = 0;
  int64_t id = 0;   // the journal's
  std::string dir;  // relative to the run directory
  // The command to send next, or in flight. A native attempt trains first.
  WorkerStep step = WorkerStep::kTrain;
  std::string command_id;  // of the command in flight
  Clock::time_point started;
  Clock::time_point command_started;
  Clock::time_point busy_since;  // first command sent
  bool busy = false;
  uint64_t log_offset = 0;  // the worker log's size when the attempt started
  json train_done;          // the `done` event of the training
  double predict_seconds = 0;
  std::string timeout_reason;               // set when the controller killed it for overrunning
  std::optional<launch::ProcessId> script;  // an outside-script member's process
  std::string script_error;                 // the message of an `error` event it printed
  bool is_script() const { return task.member->is_script(); }
};

struct Scheduler::Slot {
  launch::Device device;
  int index = 0;  // on its device
  std::string name;
  std::optional<launch::ProcessId> worker;
  bool ready = false;    // hello received
  std::string node;      // the worker's host, from its hello
  std::string gpus;      // the CUDA_VISIBLE_DEVICES it saw, from its hello
  std::string torch;     // its libtorch version, from its hello
  std::string log_path;  // relative
  std::optional<Attempt> attempt;
  Clock::time_point idle_since;
  double idle_s = 0;
};

// Routes what the host reports to the slot it concerns.
class Scheduler::Listener : public launch::ProcessHost::Listener {
 public:
  explicit Listener(Scheduler* s) : s_(s) {}

  void OnEvent(launch::ProcessId process, json event) override {
    if (Slot* slot = s_->ScriptSlot(process)) return s_->OnScriptEvent(*slot, std::move(event));
    if (Slot* slot = s_->WorkerSlot(process)) return s_->OnWorkerEvent(*slot, event);
    if (process == s_->program_) OnLog(process, std::string(protocol::kEventPrefix) + event.dump());
  }

  void OnLog(launch::ProcessId process, std::string_view text) override {
    // Stray stdout goes to the same log as the process's stderr.
    if (Slot* slot = s_->ScriptSlot(process)) {
      s_->AppendLog(s_->paths_.Absolute(
                        RunPaths::AttemptFile(slot->attempt->dir, protocol::file::kMemberLog)),
                    text);
    } else if (Slot* slot = s_->WorkerSlot(process)) {
      s_->AppendLog(s_->paths_.Absolute(slot->log_path), text);
    } else if (process == s_->program_) {
      s_->AppendLog(s_->program_log_, text);
    }
  }

  void OnStdoutClosed(launch::ProcessId process) override {
    // A worker that can no longer report is useless. A script may close stdout and go on.
    if (s_->WorkerSlot(process) != nullptr) s_->host_->Kill(process);
  }

  void OnExit(launch::ProcessId process, const launch::ExitInfo& info) override {
    if (process == s_->program_) {
      s_->program_exit_ = info;
      s_->program_.reset();
      s_->open_logs_.erase(s_->program_log_);
    } else if (Slot* slot = s_->ScriptSlot(process)) {
      s_->OnScriptExit(*slot, info);
    } else if (Slot* slot = s_->WorkerSlot(process)) {
      s_->OnWorkerExit(*slot, info);
    }
  }

 private:
  Scheduler* s_;
};

Scheduler::Scheduler(SchedulerOptions options, RunPaths paths, Journal* journal, int64_t run_id,
                     launch::ProcessHost* host, ProgressObserver* observer)
    : options_(std::move(options)),
      paths_(std::move(paths)),
      journal_(journal),
      run_id_(run_id),
      host_(host),
      observer_(observer) {}

Scheduler::~Scheduler() {
  try {
    KillAll("the controller is exiting");
  } catch (...) {
    // Out of memory while journalling the last attempts: the host still kills and reaps every
    // child, and the journal shows those attempts as running, which a resume handles.
  }
}

Result<std::unique_ptr<Scheduler>> Scheduler::Create(const SchedulerOptions& options,
                                                     const RunPaths& paths, Journal* journal,
                                                     int64_t run_id, launch::ProcessHost* host,
                                                     ProgressObserver* observer) {
  std::unique_ptr<Scheduler> s(new Scheduler(options, paths, journal, run_id, host, observer));
  std::error_code ec;
  fs::create_directories(paths.workers(), ec);
  if (ec) return Status::IOError("create " + paths.workers() + ": " + ec.message());
  for (auto it = fs::directory_iterator(paths.workers(), ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    ++s->worker_logs_;
  }
  for (const launch::Device& device : options.devices) {
    for (int i = 0; i < options.members_per_device; ++i) {
      auto slot = std::make_unique<Slot>();
      slot->device = device;
      slot->index = i;
      slot->name = options.members_per_device > 1 ? fmt::format("{}/{}", device.ToString(), i)
                                                  : device.ToString();
      s->slots_.push_back(std::move(slot));
    }
  }
  return s;
}

double Scheduler::SecondsSince(Clock::time_point t) const { return Seconds(host_->Now() - t); }

Scheduler::Slot* Scheduler::WorkerSlot(launch::ProcessId process) {
  for (auto& slot : slots_) {
    if (slot->worker == process) return slot.get();
  }
  return nullptr;
}

Scheduler::Slot* Scheduler::ScriptSlot(launch::ProcessId process) {
  for (auto& slot : slots_) {
    if (slot->attempt && slot->attempt->script == process) return slot.get();
  }
  return nullptr;
}

AttemptRef Scheduler::RefOf(const Slot& slot) const {
  const Attempt& a = *slot.attempt;
  return AttemptRef{.round = round_,
                    .member = a.task.index,
                    .member_name = a.task.member->name,
                    .slot = slot.name,
                    .attempt = a.number};
}

void Scheduler::AppendLog(const std::string& path, std::string_view line) {
  auto it = open_logs_.find(path);
  if (it == open_logs_.end()) {
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "ae"),
                                                         &std::fclose);
    if (!file) {
      observer_->Note(fmt::format("cannot open the log {}: {}", path, std::strerror(errno)));
      return;
    }
    it = open_logs_.emplace(path, std::move(file)).first;
  }
  std::FILE* f = it->second.get();
  // Flushed per line: a log is read while the run goes, and after a crash.
  if (std::fwrite(line.data(), 1, line.size(), f) != line.size() || std::fputc('\n', f) == EOF ||
      std::fflush(f) != 0) {
    observer_->Note(
        fmt::format("cannot write the log {}: {}; its lines are lost", path, std::strerror(errno)));
    open_logs_.erase(it);
  }
}

// ---- starting attempts

Status Scheduler::SpawnWorker(Slot& slot) {
  WorkerLaunch launch{.member_binary = options_.member_binary,
                      .device = slot.device,
                      .threads_per_cpu_device = options_.threads_per_cpu_device,
                      .cpu_count = options_.cpu_count,
                      .heartbeat_timeout = options_.heartbeat_timeout,
                      .memory_limit_bytes = options_.memory_limit_bytes};
  slot.log_path = RunPaths::WorkerLog(slot.device.ToString(), slot.index, ++worker_logs_);
  auto process = host_->Start(WorkerSpawnSpec(launch, paths_.Absolute(slot.log_path), paths_.root));
  if (!process.ok()) return process.status().WithContext("cannot start a worker on " + slot.name);
  slot.worker = *process;
  slot.ready = false;
  return Status::OK();
}

void Scheduler::StartQueuedAttempts() {
  for (auto& slot : slots_) {
    if (slot->attempt || queue_.empty() || interrupts_ >= 2 || !fatal_.ok()) continue;
    MemberTask task = queue_.front();
    queue_.erase(queue_.begin());
    Status st = StartAttempt(*slot, std::move(task));
    if (!st.ok()) fatal_ = st;
  }
}

Status Scheduler::StartAttempt(Slot& slot, MemberTask task) {
  Attempt a;
  a.task = std::move(task);
  a.number = a.task.next_attempt;
  a.dir = RunPaths::AttemptDir(a.task.member->name, round_, a.number);
  a.started = host_->Now();
  slot.attempt = std::move(a);
  return slot.attempt->is_script() ? StartScript(slot) : StartNativeAttempt(slot);
}

Status Scheduler::JournalStart(Slot& slot, int64_t pid, const std::string& log_path) {
  Attempt& a = *slot.attempt;
  AttemptStart start{.run_id = run_id_,
                     .round = round_,
                     .member = a.task.member->name,
                     .attempt = a.number,
                     .device = slot.device.ToString(),
                     .pid = pid,
                     .log_path = log_path};
  auto id = journal_->BeginAttempt(start);
  if (!id.ok()) {
    slot.attempt.reset();
    return id.status();
  }
  a.id = *id;
  observer_->AttemptStarted(RefOf(slot));
  return Status::OK();
}

Status Scheduler::JournalPlacement(const Slot& slot) {
  return journal_->SetAttemptPlacement(slot.attempt->id, slot.node, slot.gpus);
}

Status Scheduler::StartNativeAttempt(Slot& slot) {
  Attempt& a = *slot.attempt;
  Status spawned = slot.worker ? Status::OK() : SpawnWorker(slot);
  if (!spawned.ok()) {
    slot.attempt.reset();
    return spawned;
  }
  std::error_code ec;
  std::string abs_dir = paths_.Absolute(a.dir);
  fs::remove_all(abs_dir, ec);  // a directory an unjournalled attempt left (cannot normally exist)
  fs::create_directories(abs_dir, ec);
  if (ec) {
    slot.attempt.reset();
    return Status::IOError("create " + abs_dir + ": " + ec.message());
  }
  a.log_offset = fs::file_size(paths_.Absolute(slot.log_path), ec);
  if (ec) a.log_offset = 0;

  COHORT_RETURN_IF_ERROR(JournalStart(slot, host_->Pid(*slot.worker), slot.log_path));
  if (!slot.ready) return Status::OK();  // the worker's hello sends the first command
  COHORT_RETURN_IF_ERROR(JournalPlacement(slot));
  return SendNext(slot);
  return Status::OK();
}

Status Scheduler::StartScript(Slot& slot) {
  Attempt& a = *slot.attempt;
  // The script's pid is journalled once it runs.
  COHORT_RETURN_IF_ERROR(
      JournalStart(slot, 0, RunPaths::AttemptFile(a.dir, protocol::file::kMemberLog)));

  ScriptAttempt script{.config = config_,
                       .member_index = a.task.index,
                       .store = paths_.store(),
                       .generation = generation_,
                       .round = round_,
                       .attempt = a.number,
                       .device = slot.device,
                       .threads = options_.threads_per_cpu_device,
                       .cpu_count = options_.cpu_count,
                       .out_dir = paths_.Absolute(a.dir),
                       .warm_start_from = a.task.warm_start_from,
                       .heartbeat_timeout = options_.heartbeat_timeout,
                       .classes = shape_.classes,
                       .task = shape_.task,
                       .predict_train = a.task.predict_train,
                       .memory_limit_bytes = options_.memory_limit_bytes};
  COHORT_ASSIGN_OR_RETURN(launch::SpawnSpec spec, PrepareScriptAttempt(script));
  auto process = host_->Start(spec);
  if (!process.ok()) {
    // A program that cannot start is this attempt's failure (a typo in `command`), not the
    // controller's: it is journalled and retried like any other.
    EndAttempt(slot, AttemptStatus::kFailed, process.status().message());
    return Status::OK();
  }
  a.script = *process;
  a.busy = true;
  a.command_started = a.busy_since = host_->Now();
  slot.idle_s += Seconds(a.busy_since - slot.idle_since);
  observer_->Training(RefOf(slot), TrainingProgress{});
  return journal_->SetAttemptPid(a.id, host_->Pid(*a.script));
}

Status Scheduler::SendNext(Slot& slot) {
  Attempt& a = *slot.attempt;
  AttemptCommandContext context{
      .store = paths_.store(),
      .generation = generation_,
      .round = round_,
      .member = a.task.member,
      .attempt = a.number,
      .attempt_dir = paths_.Absolute(a.dir),
      .warm_start_from = a.task.warm_start_from,
      .tables = &config_->store,
      .classes = shape_.classes,
      .pool_sample = config_->acquisition.pool_sample,
      .pool_sample_seed = PoolSampleSeed(config_->acquisition.seed, round_)};
  json command = WorkerCommand(a.step, context);
  a.command_id = command["id"].get<std::string>();
  a.command_started = host_->Now();
  if (!a.busy) {
    a.busy = true;
    a.busy_since = a.command_started;
    slot.idle_s += Seconds(a.command_started - slot.idle_since);
  }
  if (a.step == WorkerStep::kTrain) observer_->Training(RefOf(slot), TrainingProgress{});
  if (!host_->Write(*slot.worker, command.dump()).ok()) {
    // The worker's stdin is gone: it is dying, and OnWorkerExit will end the attempt.
    host_->Kill(*slot.worker);
  }
  return Status::OK();
}

// ---- events

void Scheduler::OnWorkerEvent(Slot& slot, const json& event) {
  WorkerEventKind kind = KindOf(event);
  // An idle worker beside a script member's attempt has nothing to say about it.
  bool native_attempt = slot.attempt && !slot.attempt->is_script();
  if (kind == WorkerEventKind::kHello) {
    if (!SpeaksOurProtocol(event)) {
      observer_->Note(fmt::format(
          "worker {} speaks protocol version {}, not {}: stopping it", host_->Name(*slot.worker),
          event.contains("version") ? event["version"].dump() : "?", protocol::kVersion));
      host_->Kill(*slot.worker);
      return;
    }
    slot.ready = true;
    slot.node = JsonStringField(event, "hostname");
    slot.gpus = JsonStringField(event, "cuda_visible_devices");
    slot.torch = JsonStringField(event, "torch");
    if (native_attempt && fatal_.ok()) fatal_ = JournalPlacement(slot);
    if (native_attempt && fatal_.ok()) fatal_ = SendNext(slot);
    return;
  }
  if (!native_attempt) return;
  Attempt& a = *slot.attempt;
  if (JsonStringField(event, "id") != a.command_id || a.command_id.empty()) {
    return;  // not an answer to the command in flight (heartbeats, a late answer)
  }
  switch (kind) {
    case WorkerEventKind::kProgress:
      ShowProgress(slot, event);
      return;
    case WorkerEventKind::kError:
      EndAttempt(slot, AttemptStatus::kFailed,
                 WithMemoryLimit(JsonStringField(event, "message", "error (no message)")));
      return;
    case WorkerEventKind::kDone:
      if (a.step != WorkerStep::kTrain) return;
      a.train_done = event;
      RecordEpochs(a);
      a.step = NextPredictStep(a.task, WorkerStep::kTrain);
      observer_->Predicting(RefOf(slot));
      if (fatal_.ok()) fatal_ = SendNext(slot);
      return;
    case WorkerEventKind::kPredictions:
      if (a.step == WorkerStep::kTrain) return;
      // The worker's own measure when it gives one, else what the controller saw.
      a.predict_seconds +=
          JsonNumberField(event, "seconds").value_or(SecondsSince(a.command_started));
      if (a.step != WorkerStep::kPredictTest) {
        a.step = NextPredictStep(a.task, a.step);
        if (fatal_.ok()) fatal_ = SendNext(slot);
      } else {
        std::string problem = CheckAttemptPredictions(
            paths_.Absolute(a.dir), shape_, a.task.predict_pool, a.task.predict_train,
            a.task.member->name, a.task.member->dropout_passes);
        if (problem.empty()) {
          EndAttempt(slot, AttemptStatus::kDone, "done");
        } else {
          EndAttempt(slot, AttemptStatus::kFailed, problem);
        }
      }
      return;
    default:
      return;
  }
}

void Scheduler::ShowProgress(const Slot& slot, const json& event) {
  const Attempt& a = *slot.attempt;
  TrainingProgress p = ProgressOf(event);
  int64_t steps = std::max<int64_t>(p.steps, 1);
  int64_t done_steps = p.steps > 0 ? (p.epoch - 1) * p.steps + p.step : p.epoch;
  int64_t total_steps = p.steps > 0 ? p.epochs * steps : p.epochs;
  if (done_steps > 0 && total_steps >= done_steps) {
    p.eta_s = SecondsSince(a.command_started) * static_cast<double>(total_steps - done_steps) /
              static_cast<double>(done_steps);
  }
  observer_->Training(RefOf(slot), p);
}

// A script's events carry no command id: it runs one attempt.
void Scheduler::OnScriptEvent(Slot& slot, json event) {
  Attempt& a = *slot.attempt;
  switch (KindOf(event)) {
    case WorkerEventKind::kHello:
      // Optional for a script: where it runs, journalled like a worker's.
      if (fatal_.ok()) {
        fatal_ = journal_->SetAttemptPlacement(a.id, JsonStringField(event, "hostname"),
                                               JsonStringField(event, "cuda_visible_devices"));
      }
      break;
    case WorkerEventKind::kProgress:
      ShowProgress(slot, event);
      break;
    case WorkerEventKind::kDone:
      a.train_done = NormalizeScriptDone(std::move(event));
      RecordEpochs(a);
      observer_->Predicting(RefOf(slot));
      break;
    case WorkerEventKind::kError:
      if (event.contains("message") && event["message"].is_string()) {
        a.script_error = event["message"].get<std::string>();
      }
      break;
    default:
      break;
  }
}

void Scheduler::RecordEpochs(const Attempt& a) {
  Status st = journal_->AddEpochs(a.id, EpochsOf(a.train_done));
  if (!st.ok()) {
    // A script's odd epoch list (repeated numbers) is its log's business, not fatal.
    observer_->Note(fmt::format("round {}: {}: epochs not journalled: {}", round_,
                                a.task.member->name, st.message()));
  }
}

void Scheduler::OnWorkerExit(Slot& slot, const launch::ExitInfo& info) {
  open_logs_.erase(paths_.Absolute(slot.log_path));
  slot.worker.reset();
  slot.ready = false;
  // An idle worker beside a script member's attempt ends nothing but itself.
  if (!slot.attempt || slot.attempt->is_script()) return;
  const Attempt& a = *slot.attempt;
  std::string why = info.ToString();
  if (!a.timeout_reason.empty()) why = a.timeout_reason + " (" + why + ")";
  EndAttempt(slot, KilledByUs(info) ? AttemptStatus::kKilled : AttemptStatus::kFailed,
             KilledByUs(info) ? "worker " + why : WithMemoryLimit("worker " + why));
}

void Scheduler::OnScriptExit(Slot& slot, const launch::ExitInfo& info) {
  Attempt& a = *slot.attempt;
  a.script.reset();
  std::string log_path = paths_.Absolute(RunPaths::AttemptFile(a.dir, protocol::file::kMemberLog));
  open_logs_.erase(log_path);
  std::string log = " (log: " + log_path + ")";
  if (info.reason == launch::ExitReason::kExited && info.exit_code == 0) {
    std::string problem = CheckAttemptPredictions(paths_.Absolute(a.dir), shape_, true,
                                                  a.task.predict_train, a.task.member->name);
    if (problem.empty()) {
      a.predict_seconds = 0;
      EndAttempt(slot, AttemptStatus::kDone, "exit 0");
    } else {
      EndAttempt(slot, AttemptStatus::kFailed, problem + log);
    }
    return;
  }
  std::string why = info.ToString();
  if (!a.timeout_reason.empty()) why = a.timeout_reason + " (" + why + ")";
  if (!a.script_error.empty()) {
    why += ": " + a.script_error;
  } else if (!KilledByUs(info)) {
    // What the script said last on stderr is most often the error (a Python traceback's end).
    std::string last = LastNonEmptyLine(log_path);
    if (!last.empty()) why += ": " + last;
  }
  EndAttempt(slot, KilledByUs(info) ? AttemptStatus::kKilled : AttemptStatus::kFailed,
             KilledByUs(info) ? "script " + why + log : WithMemoryLimit("script " + why + log));
}

// ---- ending attempts

std::string Scheduler::WithMemoryLimit(const std::string& why) const {
  if (options_.memory_limit_bytes == 0) return why;
  std::string limit = fmt::format("{:.3g} GB (failure.memory_limit_gb)",
                                  static_cast<double>(options_.memory_limit_bytes) / (1 << 30));
  for (const char* sign : {"can't allocate memory", "bad_alloc", "out of memory", "MemoryError",
                           "Cannot allocate memory"}) {
    if (why.find(sign) != std::string::npos) {
      return "exceeded its memory limit of " + limit + ": " + why;
    }
  }
  // A crash under the limit may be an allocation nobody checked.
  return why + " (under a memory limit of " + limit + ")";
}

void Scheduler::CopyAttemptLog(const Slot& slot, const Attempt& a) {
  std::ifstream in(paths_.Absolute(slot.log_path), std::ios::binary);
  if (!in) return;
  in.seekg(static_cast<std::streamoff>(a.log_offset));
  std::ofstream out(paths_.Absolute(RunPaths::AttemptFile(a.dir, protocol::file::kWorkerLog)),
                    std::ios::binary | std::ios::trunc);
  out << in.rdbuf();
}

void Scheduler::RecordResult(const Attempt& a, AttemptStatus status, const std::string& exit,
                             Clock::time_point now, const std::string& worker_torch,
                             AttemptEnd* end) {
  MemberResult scratch;  // attempts ended after the round returned (the destructor's kill)
  MemberResult& result = results_ != nullptr ? (*results_)[a.task.index] : scratch;
  result.attempt = a.number;
  if (status != AttemptStatus::kDone) {
    result.done = false;
    result.error = exit;
    return;
  }
  bool script = a.is_script();
  json metrics = AttemptMetrics(a.train_done, script, a.predict_seconds, Seconds(now - a.started));
  // Not a metric: which libtorch trained it, for the report's "versions".
  if (!script && !worker_torch.empty()) metrics["worker_torch"] = worker_torch;
  end->metrics_json = metrics.dump();
  end->checkpoint = RunPaths::AttemptFile(
      a.dir, script ? protocol::file::kScriptCheckpoint : protocol::file::kNativeCheckpoint);
  bool pool = a.task.predict_pool || script;
  std::string test_file = RunPaths::AttemptFile(a.dir, protocol::file::kTestPredictions);
  std::string pool_file = RunPaths::AttemptFile(a.dir, protocol::file::kPoolPredictions);
  std::string train_file = RunPaths::AttemptFile(a.dir, protocol::file::kTrainPredictions);
  json predictions = {{"test", test_file}};
  if (pool) predictions["pool"] = pool_file;
  if (a.task.predict_train) predictions["train"] = train_file;
  end->predictions_json = predictions.dump();
  result.done = true;
  result.error.clear();
  result.checkpoint = end->checkpoint;
  result.predictions_pool = pool ? pool_file : "";
  result.predictions_test = test_file;
  result.predictions_train = a.task.predict_train ? train_file : "";
  result.train_seconds = JsonNumberField(a.train_done, "seconds").value_or(0);
  result.predict_seconds = a.predict_seconds;
  if (stats_ != nullptr) stats_->predict_s += a.predict_seconds;
}

void Scheduler::EndAttempt(Slot& slot, AttemptStatus status, const std::string& exit_in) {
  std::string exit = exit_in;
  const bool stopping = !kill_all_reason_.empty();
  if (stopping && status != AttemptStatus::kDone) {
    // Not the member's failure: journalled as such, so a resume does not count it.
    status = AttemptStatus::kInterrupted;
    exit = kill_all_reason_;
  }
  AttemptRef ref = RefOf(slot);
  Attempt a = std::move(*slot.attempt);
  slot.attempt.reset();
  auto now = host_->Now();
  if (!a.busy) slot.idle_s += Seconds(now - slot.idle_since);
  slot.idle_since = now;
  if (!a.is_script()) CopyAttemptLog(slot, a);

  AttemptEnd end;
  end.status = status;
  end.exit = exit;
  RecordResult(a, status, exit, now, slot.torch, &end);
  if (status == AttemptStatus::kDone) {
    observer_->AttemptDone(ref, Seconds(now - a.started));
  } else {
    MemberTask retry = a.task;
    retry.next_attempt = a.number + 1;
    retry.attempts_left -= 1;
    AfterFailure after = stopping                  ? AfterFailure::kStopped
                         : retry.attempts_left > 0 ? AfterFailure::kRetrying
                                                   : AfterFailure::kNoRetriesLeft;
    if (after == AfterFailure::kRetrying) queue_.push_back(retry);
    observer_->AttemptFailed(ref, exit, after);
  }
  Status st = journal_->FinishAttempt(a.id, end);
  if (!st.ok() && fatal_.ok()) fatal_ = st;
  // A worker that failed its command but lives serves the next member; a dead one is gone.
}

void Scheduler::CheckDeadlines() {
  if (options_.attempt_timeout.count() <= 0) return;
  auto now = host_->Now();
  for (auto& slot : slots_) {
    if (!slot->attempt || !slot->attempt->timeout_reason.empty()) continue;
    std::optional<launch::ProcessId> process =
        slot->attempt->script ? slot->attempt->script : slot->worker;
    if (!process) continue;
    if (now - slot->attempt->started > options_.attempt_timeout) {
      slot->attempt->timeout_reason =
          fmt::format("killed: the attempt ran longer than attempt_timeout_s ({} s)",
                      std::chrono::duration<double>(options_.attempt_timeout).count());
      host_->Terminate(*process);
    }
  }
}

void Scheduler::CapLogs() {
  if (options_.log_limit_bytes == 0) return;
  auto now = host_->Now();
  if (now < next_log_check_) return;
  next_log_check_ = now + std::chrono::seconds(1);
  for (auto& slot : slots_) {
    std::string path;
    if (slot->attempt && slot->attempt->is_script()) {
      path = paths_.Absolute(RunPaths::AttemptFile(slot->attempt->dir, protocol::file::kMemberLog));
    } else if (slot->worker) {
      path = paths_.Absolute(slot->log_path);
    } else {
      continue;
    }
    std::error_code ec;
    uint64_t size = fs::file_size(path, ec);
    if (ec || size <= options_.log_limit_bytes) continue;
    RotateLog(path);
    // The attempt's own part of a worker log now starts at the top of the fresh one.
    if (slot->attempt && !slot->attempt->is_script()) slot->attempt->log_offset = 0;
  }
}

void Scheduler::RotateLog(const std::string& path) {
  // Copy, then truncate: the process keeps its file open (O_APPEND) and writes on at the top.
  // Lines written between the two steps are lost; nothing else is.
  std::error_code ec;
  fs::copy_file(path, path + ".1", fs::copy_options::overwrite_existing, ec);
  if (!ec) fs::resize_file(path, 0, ec);
  if (ec) {
    observer_->Note(fmt::format("cannot rotate the log {}: {}", path, ec.message()));
    return;
  }
  uint64_t limit = options_.log_limit_bytes;
  std::string size =
      limit % (1 << 20) == 0 ? fmt::format("{} MB", limit >> 20) : fmt::format("{} bytes", limit);
  AppendLog(path, fmt::format("[cohort: this log passed {}; its earlier part is in {}.1, older "
                              "parts are dropped (failure.log_limit_mb)]",
                              size, fs::path(path).filename().string()));
}

// ---- the loop over the host

Status Scheduler::PollOnce(std::chrono::milliseconds timeout) {
  Listener listener(this);
  COHORT_ASSIGN_OR_RETURN(int interrupts, host_->Poll(timeout, listener));
  if (interrupts > 0) {
    interrupts_ += interrupts;
    if (interrupts_ == interrupts) {
      observer_->Note(
          "interrupted: finishing the running round, then stopping (Ctrl-C again to stop now)");
    }
  }
  CheckDeadlines();
  CapLogs();
  observer_->Tick(false);
  return fatal_;
}

void Scheduler::KillAll(const std::string& why) {
  // Attempts ended here end for `why`, not for the signal that carried it out, and are not
  // retried: what they were doing was not their fault.
  kill_all_reason_ = why;
  for (auto& slot : slots_) {
    if (slot->worker) host_->Kill(*slot->worker);
    if (slot->attempt && slot->attempt->script) host_->Kill(*slot->attempt->script);
  }
  if (program_) host_->Kill(*program_);
  // Reap them, so every attempt gets its end in the journal.
  Listener listener(this);
  auto deadline = host_->Now() + options_.kill_grace + std::chrono::seconds(5);
  while (host_->live() > 0 && host_->Now() < deadline) {
    if (!host_->Poll(std::chrono::milliseconds(100), listener).ok()) break;
  }
  for (auto& slot : slots_) {
    if (slot->attempt) EndAttempt(*slot, AttemptStatus::kInterrupted, why);
  }
  kill_all_reason_.clear();
  open_logs_.clear();
}

Status Scheduler::RunRound(int64_t round, uint64_t generation, const LoopConfig& config,
                           const PredictionShape& shape, std::vector<MemberTask> tasks,
                           std::vector<MemberResult>* results, PhaseStats* stats) {
  round_ = round;
  generation_ = generation;
  config_ = &config;
  shape_ = shape;
  queue_ = std::move(tasks);
  results_ = results;
  *stats = PhaseStats{};
  stats_ = stats;
  // However this returns (an exception from a library included), the caller's result and
  // stats objects are not written to afterwards.
  struct Clear {
    Scheduler* s;
    ~Clear() {
      s->results_ = nullptr;
      s->stats_ = nullptr;
    }
  } clear{this};
  auto phase_start = host_->Now();
  for (auto& slot : slots_) {
    slot->idle_s = 0;
    slot->idle_since = phase_start;
  }
  while (fatal_.ok()) {
    StartQueuedAttempts();
    bool running = std::any_of(slots_.begin(), slots_.end(),
                               [](const auto& s) { return s->attempt.has_value(); });
    if (!running && (queue_.empty() || interrupts_ >= 2 || !fatal_.ok())) break;
    Status st = PollOnce(options_.poll_interval);
    if (!st.ok() && fatal_.ok()) fatal_ = st;
    if (interrupts_ >= 2) {
      observer_->Note("interrupted twice: stopping the workers now");
      KillAll("interrupted (Ctrl-C)");
      queue_.clear();
      break;
    }
  }
  auto phase_end = host_->Now();
  stats->wall_s = Seconds(phase_end - phase_start);
  for (auto& slot : slots_) {
    if (!slot->attempt) slot->idle_s += Seconds(phase_end - slot->idle_since);
    stats->idle_s += slot->idle_s;
  }
  observer_->Tick(true);
  if (!fatal_.ok()) {
    Status st = fatal_;
    KillAll("the controller stopped: " + st.message());
    return st;
  }
  if (interrupts_ >= 2) return Status::Aborted("interrupted");
  return Status::OK();
}

Result<launch::ExitInfo> Scheduler::RunProgram(const launch::SpawnSpec& spec) {
  COHORT_ASSIGN_OR_RETURN(launch::ProcessId process, host_->StartHere(spec));
  program_ = process;
  program_log_ = spec.stderr_path;
  program_exit_.reset();
  Listener listener(this);
  while (!program_exit_) {
    COHORT_ASSIGN_OR_RETURN(int interrupts, host_->Poll(options_.poll_interval, listener));
    if (interrupts > 0 && interrupts_ == 0) {
      observer_->Note(
          "interrupted: finishing the round once the oracle is done, then stopping "
          "(Ctrl-C again to stop now)");
    }
    interrupts_ += interrupts;
    if (interrupts_ >= 2 && program_) host_->Kill(*program_);
  }
  if (interrupts_ >= 2) return Status::Aborted("interrupted");
  return *program_exit_;
}

int Scheduler::PollSignals() {
  Status st = PollOnce(std::chrono::milliseconds(0));
  if (!st.ok() && fatal_.ok()) fatal_ = st;
  return interrupts_;
}

void Scheduler::Shutdown(std::chrono::milliseconds grace) {
  for (auto& slot : slots_) {
    if (slot->worker && !slot->attempt) {
      (void)host_->Write(*slot->worker,
                         json{{"op", protocol::op::kShutdown}, {"id", "shutdown"}}.dump());
      host_->CloseStdin(*slot->worker);
    }
  }
  Listener listener(this);
  auto deadline = host_->Now() + grace;
  while (host_->live() > 0 && host_->Now() < deadline) {
    if (!host_->Poll(std::chrono::milliseconds(50), listener).ok()) break;
  }
  KillAll("the controller is exiting");
}

}  // namespace cohort::loop
