#include "loop/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <system_error>
#include <utility>

#include "common/json_text.h"
#include "loop/acquisition.h"
#include "model/config_json.h"
#include "store/import.h"
#include "store/snapshot.h"

namespace cohort::loop {

namespace {

namespace fs = std::filesystem;
using launch::Clock;
using nlohmann::json;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Events come from other programs: a field of the wrong type reads as absent, never throws.
int64_t IntField(const json& event, const char* key) {
  // Clamped before the conversion: a double beyond int64 does not convert.
  return static_cast<int64_t>(std::clamp(JsonNumberField(event, key).value_or(0), -1e15, 1e15));
}

}  // namespace

// A member's attempt on a slot.
struct Scheduler::Attempt {
  MemberTask task;
  int number = 0;
  int64_t id = 0;   // the journal's
  std::string dir;  // relative to the run directory
  // The command to send next, or in flight. A native attempt trains first.
  enum class Step { kTrain, kPredictPool, kPredictTest } step = Step::kTrain;
  std::string command_id;  // of the command in flight
  Clock::time_point started;
  Clock::time_point command_started;
  Clock::time_point busy_since;  // first command sent
  bool busy = false;
  uint64_t log_offset = 0;  // the worker log's size when the attempt started
  json train_done;          // the worker's `done` event for the training
  double predict_seconds = 0;
  std::string timeout_reason;            // set when the controller killed it for overrunning
  launch::Subprocess* script = nullptr;  // an outside-script member's process
  std::string script_error;              // the message of an `error` event it printed
};

struct Scheduler::Slot {
  launch::Device device;
  int index = 0;  // on its device
  std::string name;
  launch::Subprocess* worker = nullptr;
  bool ready = false;    // hello received
  std::string log_path;  // relative
  std::optional<Attempt> attempt;
  Clock::time_point idle_since;
  double idle_s = 0;
};

class Scheduler::Handler : public launch::SubprocessSet::Handler {
 public:
  explicit Handler(Scheduler* s) : s_(s) {}

  Slot* SlotOf(launch::Subprocess& child) {
    for (auto& slot : s_->slots_) {
      if (slot->worker == &child) return slot.get();
    }
    return nullptr;
  }
  Slot* ScriptSlotOf(launch::Subprocess& child) {
    for (auto& slot : s_->slots_) {
      if (slot->attempt && slot->attempt->script == &child) return slot.get();
    }
    return nullptr;
  }

  void OnEvent(launch::Subprocess& child, json event) override {
    if (Slot* script_slot = ScriptSlotOf(child)) {
      OnScriptEvent(*script_slot, std::move(event));
      return;
    }
    Slot* slot = SlotOf(child);
    if (slot == nullptr) {
      if (&child == s_->program_) OnLog(child, "@cohort " + event.dump());
      return;
    }
    std::string ev = JsonStringField(event, "ev");
    // An idle worker beside a script member's attempt has nothing to say about it.
    bool native_attempt = slot->attempt && !slot->attempt->task.member->is_script();
    if (ev == "hello") {
      if (IntField(event, "version") != 1) {
        s_->display_->Note(fmt::format("worker {} speaks protocol version {}, not 1: stopping it",
                                       child.name(),
                                       event.contains("version") ? event["version"].dump() : "?"));
        (void)child.Kill();
        return;
      }
      slot->ready = true;
      if (native_attempt && s_->fatal_.ok()) s_->fatal_ = s_->SendNext(*slot);
      return;
    }
    if (!native_attempt || ev == "heartbeat" || ev == "bye") return;
    Attempt& a = *slot->attempt;
    std::string id = JsonStringField(event, "id");
    if (id.empty() || id != a.command_id) return;  // not an answer to the command in flight
    MemberLine& line = s_->display_->member(a.task.index);
    if (ev == "progress") {
      ShowProgress(line, a, event);
      return;
    }
    if (ev == "error") {
      std::string message = JsonStringField(event, "message", "error (no message)");
      s_->EndAttempt(*slot, AttemptStatus::kFailed, message);
      return;
    }
    if (ev == "done" && a.step == Attempt::Step::kTrain) {
      a.train_done = std::move(event);
      RecordEpochs(a);
      a.step = a.task.predict_pool ? Attempt::Step::kPredictPool : Attempt::Step::kPredictTest;
      line.state = MemberLine::State::kPredicting;
      line.eta_s.reset();
      if (s_->fatal_.ok()) s_->fatal_ = s_->SendNext(*slot);
      return;
    }
    if (ev == "predictions" &&
        (a.step == Attempt::Step::kPredictPool || a.step == Attempt::Step::kPredictTest)) {
      // The worker's own measure when it gives one, else what the controller saw.
      a.predict_seconds +=
          JsonNumberField(event, "seconds").value_or(Seconds(Clock::now() - a.command_started));
      if (a.step == Attempt::Step::kPredictPool) {
        a.step = Attempt::Step::kPredictTest;
        if (s_->fatal_.ok()) s_->fatal_ = s_->SendNext(*slot);
      } else {
        s_->EndAttempt(*slot, AttemptStatus::kDone, "done");
      }
      return;
    }
  }

  static void ShowProgress(MemberLine& line, const Attempt& a, const json& event) {
    line.state = MemberLine::State::kTraining;
    line.epoch = IntField(event, "epoch");
    line.epochs = IntField(event, "epochs");
    line.step = IntField(event, "step");
    line.steps = IntField(event, "steps");
    line.loss = JsonNumberField(event, "loss");
    line.samples_per_second = JsonNumberField(event, "samples_per_second");
    int64_t steps = std::max<int64_t>(line.steps, 1);
    int64_t done_steps = line.steps > 0 ? (line.epoch - 1) * line.steps + line.step : line.epoch;
    int64_t total_steps = line.steps > 0 ? line.epochs * steps : line.epochs;
    if (done_steps > 0 && total_steps >= done_steps) {
      double elapsed = Seconds(Clock::now() - a.command_started);
      line.eta_s =
          elapsed * static_cast<double>(total_steps - done_steps) / static_cast<double>(done_steps);
    }
  }

  // A script's events carry no command id: it runs one attempt.
  void OnScriptEvent(Slot& slot, json event) {
    Attempt& a = *slot.attempt;
    std::string ev = JsonStringField(event, "ev");
    MemberLine& line = s_->display_->member(a.task.index);
    if (ev == "progress") {
      ShowProgress(line, a, event);
    } else if (ev == "done") {
      a.train_done = std::move(event);
      if (a.train_done.contains("metrics") && a.train_done["metrics"].is_object()) {
        for (const auto& [k, v] : a.train_done["metrics"].items()) {
          if (!a.train_done.contains(k)) a.train_done[k] = v;
        }
      }
      RecordEpochs(a);
      line.state = MemberLine::State::kPredicting;
    } else if (ev == "error" && event.contains("message") && event["message"].is_string()) {
      a.script_error = event["message"].get<std::string>();
    }
  }

  void RecordEpochs(Attempt& a) {
    std::vector<EpochRecord> epochs;
    const json& list = a.train_done.contains("epochs") && a.train_done["epochs"].is_array()
                           ? a.train_done["epochs"]
                           : json::array();
    for (const json& e : list) {
      if (!e.is_object()) continue;
      EpochRecord r;
      r.epoch = IntField(e, "epoch");
      r.train_loss = JsonNumberField(e, "train_loss").value_or(0);
      r.val_loss = JsonNumberField(e, "val_loss");
      r.val_accuracy = JsonNumberField(e, "val_accuracy");
      r.lr = JsonNumberField(e, "lr").value_or(0);
      r.seconds = JsonNumberField(e, "seconds").value_or(0);
      if (!std::isfinite(r.train_loss)) r.train_loss = 0;
      epochs.push_back(r);
    }
    Status st = s_->journal_->AddEpochs(a.id, epochs);
    if (!st.ok()) {
      // A script's odd epoch list (repeated numbers) is its log's business, not fatal.
      s_->display_->Note(fmt::format("round {}: {}: epochs not journalled: {}", s_->round_,
                                     a.task.member->name, st.message()));
    }
  }

  void OnLog(launch::Subprocess& child, std::string_view text) override {
    // Stray stdout goes to the same log as the child's stderr.
    std::string path;
    if (Slot* script_slot = ScriptSlotOf(child)) {
      path = s_->paths_.Absolute(script_slot->attempt->dir + "/member.log");
    } else if (Slot* slot = SlotOf(child)) {
      path = s_->paths_.Absolute(slot->log_path);
    } else if (&child == s_->program_) {
      path = program_log;
    }
    if (path.empty()) return;
    std::ofstream out(path, std::ios::app);
    out << text << '\n';
  }

  void OnStdoutClosed(launch::Subprocess& child) override {
    // A worker that can no longer report is useless. A script may close stdout and go on.
    if (SlotOf(child) != nullptr) (void)child.Kill();
  }

  void OnExit(launch::Subprocess& child, const launch::ExitInfo& info) override {
    if (&child == s_->program_) {
      s_->program_exit_ = info;
      s_->program_ = nullptr;
      return;
    }
    if (Slot* script_slot = ScriptSlotOf(child)) {
      s_->ScriptExited(*script_slot, info);
      return;
    }
    Slot* slot = SlotOf(child);
    if (slot == nullptr) return;
    slot->worker = nullptr;
    slot->ready = false;
    // An idle worker beside a script member's attempt ends nothing but itself.
    if (!slot->attempt || slot->attempt->task.member->is_script()) return;
    const Attempt& a = *slot->attempt;
    std::string why = info.ToString();
    if (!a.timeout_reason.empty()) why = a.timeout_reason + " (" + why + ")";
    bool killed =
        info.reason != launch::ExitReason::kExited && info.reason != launch::ExitReason::kSignalled;
    s_->EndAttempt(*slot, killed ? AttemptStatus::kKilled : AttemptStatus::kFailed,
                   "worker " + why);
  }

  std::string program_log;

 private:
  Scheduler* s_;
};

Scheduler::Scheduler(SchedulerOptions options, RunPaths paths, Journal* journal, int64_t run_id,
                     Display* display)
    : options_(std::move(options)),
      paths_(std::move(paths)),
      journal_(journal),
      run_id_(run_id),
      display_(display) {}

Scheduler::~Scheduler() {
  try {
    KillAll("the controller is exiting");
  } catch (...) {
    // Out of memory while journalling the last attempts: the set's own destructor still
    // kills and reaps every child, and the journal shows those attempts as running, which a
    // resume handles.
  }
}

Result<std::unique_ptr<Scheduler>> Scheduler::Create(const SchedulerOptions& options,
                                                     const RunPaths& paths, Journal* journal,
                                                     int64_t run_id, Display* display) {
  std::unique_ptr<Scheduler> s(new Scheduler(options, paths, journal, run_id, display));
  launch::SubprocessSet::Options set_options;
  set_options.kill_grace = options.kill_grace;
  COHORT_ASSIGN_OR_RETURN(s->set_, launch::SubprocessSet::Create(set_options));
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

Status Scheduler::SpawnWorker(Slot& slot) {
  launch::SpawnSpec spec;
  const bool cuda = slot.device.is_cuda();
  double heartbeat_s = std::clamp(
      std::chrono::duration<double>(options_.heartbeat_timeout).count() / 4.0, 0.05, 2.0);
  spec.argv = {options_.member_binary,
               "worker",
               "--device",
               cuda ? "cuda:0" : "cpu",
               "--threads",
               std::to_string(options_.threads_per_cpu_device),
               "--heartbeat",
               fmt::format("{}", heartbeat_s)};
  spec.env =
      launch::DeviceEnvironment(slot.device, options_.threads_per_cpu_device, options_.cpu_count);
  std::string device_name = slot.device.ToString();
  std::replace(device_name.begin(), device_name.end(), ':', '-');
  slot.log_path = fmt::format("workers/{}-{}-{:04}.log", device_name, slot.index, ++worker_logs_);
  spec.stderr_path = paths_.Absolute(slot.log_path);
  spec.cwd = paths_.root;
  spec.heartbeat_timeout = options_.heartbeat_timeout;
  auto child = set_->Spawn(spec);
  if (!child.ok()) return child.status().WithContext("cannot start a worker on " + slot.name);
  slot.worker = *child;
  slot.ready = false;
  return Status::OK();
}

Status Scheduler::StartAttempt(Slot& slot, MemberTask task) {
  Attempt a;
  a.task = std::move(task);
  a.number = a.task.next_attempt;
  a.dir = RunPaths::AttemptDir(a.task.member->name, round_, a.number);
  a.started = Clock::now();
  if (a.task.member->is_script()) {
    slot.attempt = std::move(a);
    return StartScript(slot);
  }
  if (slot.worker == nullptr) COHORT_RETURN_IF_ERROR(SpawnWorker(slot));
  std::error_code ec;
  std::string abs_dir = paths_.Absolute(a.dir);
  fs::remove_all(abs_dir, ec);  // a directory an unjournalled attempt left (cannot normally exist)
  fs::create_directories(abs_dir, ec);
  if (ec) return Status::IOError("create " + abs_dir + ": " + ec.message());
  a.log_offset = fs::file_size(paths_.Absolute(slot.log_path), ec);
  if (ec) a.log_offset = 0;

  AttemptStart start;
  start.run_id = run_id_;
  start.round = round_;
  start.member = a.task.member->name;
  start.attempt = a.number;
  start.device = slot.device.ToString();
  start.pid = slot.worker->pid();
  start.log_path = slot.log_path;
  COHORT_ASSIGN_OR_RETURN(a.id, journal_->BeginAttempt(start));

  MemberLine& line = display_->member(a.task.index);
  line = MemberLine{.name = line.name, .retries = line.retries};
  line.device = slot.name;
  line.attempt = a.number;
  line.state = MemberLine::State::kStarting;
  slot.attempt = std::move(a);
  if (slot.ready) return SendNext(slot);
  return Status::OK();
}

Status Scheduler::StartScript(Slot& slot) {
  Attempt& a = *slot.attempt;
  const MemberConfig& member = *a.task.member;
  AttemptStart start;
  start.run_id = run_id_;
  start.round = round_;
  start.member = member.name;
  start.attempt = a.number;
  start.device = slot.device.ToString();
  start.log_path = a.dir + "/member.log";
  auto id = journal_->BeginAttempt(start);
  if (!id.ok()) {
    slot.attempt.reset();
    return id.status();
  }
  a.id = *id;

  std::string out_dir = paths_.Absolute(a.dir);
  std::error_code ec;
  fs::remove_all(out_dir, ec);
  fs::create_directories(out_dir, ec);
  if (ec) return Status::IOError("create " + out_dir + ": " + ec.message());
  const bool cuda = slot.device.is_cuda();
  const int threads = options_.threads_per_cpu_device;
  json spec = {
      {"version", 1},
      {"store", paths_.store()},
      {"generation", generation_},
      {"tables",
       {{"train", config_->store.train},
        {"pool", config_->store.pool},
        {"test", config_->store.test}}},
      {"member", member.name},
      {"member_index", a.task.index},
      {"round", round_},
      {"attempt", a.number},
      {"device", slot.device.ToString()},
      {"torch_device", cuda ? "cuda:0" : "cpu"},
      {"threads", threads},
      {"out_dir", out_dir},
      {"predictions",
       {{"pool", out_dir + "/predictions-pool.npy"}, {"test", out_dir + "/predictions-test.npy"}}},
      {"checkpoint", out_dir + "/checkpoint"},
      {"warm_start_from",
       a.task.warm_start_from.empty() ? json(nullptr) : json(a.task.warm_start_from)},
      {"heartbeat_timeout_s", std::chrono::duration<double>(options_.heartbeat_timeout).count()},
      {"config", member.script_config.is_null() ? json::object() : member.script_config},
  };
  std::string spec_path = out_dir + "/spec.json";
  COHORT_RETURN_IF_ERROR(
      WriteFileAtomically(store::Env::Default(), spec_path, spec.dump(2) + "\n"));

  launch::SpawnSpec sp;
  sp.argv = member.command;
  sp.env = launch::DeviceEnvironment(slot.device, threads, options_.cpu_count);
  std::vector<std::pair<std::string, std::string>> vars = {
      {"COHORT_SPEC", spec_path},
      {"COHORT_STORE", paths_.store()},
      {"COHORT_GENERATION", std::to_string(generation_)},
      {"COHORT_TRAIN_TABLE", config_->store.train},
      {"COHORT_POOL_TABLE", config_->store.pool},
      {"COHORT_TEST_TABLE", config_->store.test},
      {"COHORT_MEMBER", member.name},
      {"COHORT_MEMBER_INDEX", std::to_string(a.task.index)},
      {"COHORT_ROUND", std::to_string(round_)},
      {"COHORT_ATTEMPT", std::to_string(a.number)},
      {"COHORT_DEVICE", slot.device.ToString()},
      {"COHORT_TORCH_DEVICE", cuda ? "cuda:0" : "cpu"},
      {"COHORT_THREADS", std::to_string(threads)},
      {"COHORT_OUT_DIR", out_dir},
      // Plain print() lines count as signs of life only if they are not held in a buffer.
      {"PYTHONUNBUFFERED", "1"},
  };
  sp.env.insert(sp.env.end(), vars.begin(), vars.end());
  sp.cwd = fs::path(config_->path).parent_path().string();
  if (sp.cwd.empty()) sp.cwd = ".";
  sp.stderr_path = out_dir + "/member.log";
  sp.heartbeat_timeout = options_.heartbeat_timeout;
  auto child = set_->Spawn(sp);
  MemberLine& line = display_->member(a.task.index);
  line = MemberLine{.name = line.name, .retries = line.retries};
  line.device = slot.name;
  line.attempt = a.number;
  if (!child.ok()) {
    // A program that cannot start is this attempt's failure (a typo in `command`), not the
    // controller's: it is journalled and retried like any other.
    EndAttempt(slot, AttemptStatus::kFailed, child.status().message());
    return Status::OK();
  }
  a.script = *child;
  a.busy = true;
  a.command_started = a.busy_since = Clock::now();
  slot.idle_s += Seconds(a.busy_since - slot.idle_since);
  line.state = MemberLine::State::kTraining;
  return journal_->SetAttemptPid(a.id, a.script->pid());
}

std::string Scheduler::CheckPredictions(const Attempt& a) const {
  int64_t classes = 0;
  for (bool pool : {true, false}) {
    std::string name = pool ? "predictions-pool.npy" : "predictions-test.npy";
    std::string path = paths_.Absolute(a.dir + "/" + name);
    if (!fs::exists(path)) return "exited 0 without writing " + name;
    auto array = store::ReadNpyFile(path);
    if (!array.ok()) return array.status().message();
    uint64_t rows = pool ? pool_rows_ : test_rows_;
    if (array->dtype != store::Dtype::kFloat32 || array->shape.size() != 2 ||
        array->shape[0] != rows || array->shape[1] < 2) {
      return fmt::format("{}: expected float32 probabilities of shape ({}, classes), got {} {}",
                         name, rows, store::DtypeName(array->dtype),
                         store::DimsToString(array->shape));
    }
    auto width = static_cast<int64_t>(array->shape[1]);
    if (classes != 0 && width != classes) {
      return fmt::format("{} has {} classes but predictions-pool.npy has {}", name, width, classes);
    }
    classes = width;
    std::vector<float> values(array->data.size() / sizeof(float));
    std::memcpy(values.data(), array->data.data(), array->data.size());
    auto view = MakeEnsemblePredictions(values, 1, static_cast<int64_t>(rows), classes);
    Status valid = view.ok() ? ValidatePredictions(*view) : view.status();
    if (!valid.ok()) return name + ": " + valid.message();
  }
  return "";
}

void Scheduler::ScriptExited(Slot& slot, const launch::ExitInfo& info) {
  Attempt& a = *slot.attempt;
  a.script = nullptr;
  std::string log = " (log: " + paths_.Absolute(a.dir + "/member.log") + ")";
  if (info.reason == launch::ExitReason::kExited && info.exit_code == 0) {
    std::string problem = CheckPredictions(a);
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
  if (!a.script_error.empty()) why += ": " + a.script_error;
  bool killed =
      info.reason != launch::ExitReason::kExited && info.reason != launch::ExitReason::kSignalled;
  EndAttempt(slot, killed ? AttemptStatus::kKilled : AttemptStatus::kFailed, "script " + why + log);
}

Status Scheduler::SendNext(Slot& slot) {
  Attempt& a = *slot.attempt;
  const MemberConfig& member = *a.task.member;
  json command;
  command["version"] = 1;
  command["store"] = paths_.store();
  command["generation"] = generation_;
  command["member"] = member.name;
  std::string prefix = fmt::format("r{}/{}/a{}", round_, member.name, a.number);
  switch (a.step) {
    case Attempt::Step::kTrain: {
      model::TrainConfig train = member.train;
      train.member = member.name;
      train.warm_start_from = a.task.warm_start_from;
      json config = model::TrainConfigToJson(train);
      config.erase("device");  // the worker's own: its --device and --threads
      command["op"] = "train";
      command["table"] = config_->store.train;
      command["checkpoint"] = paths_.Absolute(a.dir + "/checkpoint.pt");
      command["config"] = std::move(config);
      a.command_id = prefix + "/train";
      break;
    }
    case Attempt::Step::kPredictPool:
    case Attempt::Step::kPredictTest: {
      bool pool = a.step == Attempt::Step::kPredictPool;
      command["op"] = "predict";
      command["table"] = pool ? config_->store.pool : config_->store.test;
      command["checkpoint"] = paths_.Absolute(a.dir + "/checkpoint.pt");
      command["out"] =
          paths_.Absolute(a.dir + (pool ? "/predictions-pool.npy" : "/predictions-test.npy"));
      a.command_id = prefix + (pool ? "/pool" : "/test");
      break;
    }
  }
  command["id"] = a.command_id;
  a.command_started = Clock::now();
  if (!a.busy) {
    a.busy = true;
    a.busy_since = a.command_started;
    slot.idle_s += Seconds(a.command_started - slot.idle_since);
  }
  if (a.step == Attempt::Step::kTrain) {
    display_->member(a.task.index).state = MemberLine::State::kTraining;
  }
  Status st = slot.worker->Write(command.dump());
  if (!st.ok()) {
    // The worker's stdin is gone: it is dying, and OnExit will end the attempt.
    (void)slot.worker->Kill();
  }
  return Status::OK();
}

void Scheduler::CopyAttemptLog(const Slot& slot, const Attempt& a) {
  std::ifstream in(paths_.Absolute(slot.log_path), std::ios::binary);
  if (!in) return;
  in.seekg(static_cast<std::streamoff>(a.log_offset));
  std::ofstream out(paths_.Absolute(a.dir + "/worker.log"), std::ios::binary | std::ios::trunc);
  out << in.rdbuf();
}

void Scheduler::EndAttempt(Slot& slot, AttemptStatus status, const std::string& exit_in) {
  std::string exit = exit_in;
  if (!kill_all_reason_.empty() && status != AttemptStatus::kDone) {
    status = AttemptStatus::kKilled;
    exit = kill_all_reason_;
  }
  Attempt a = std::move(*slot.attempt);
  slot.attempt.reset();
  auto now = Clock::now();
  if (!a.busy) slot.idle_s += Seconds(now - slot.idle_since);
  slot.idle_since = now;
  if (!a.task.member->is_script()) CopyAttemptLog(slot, a);

  AttemptEnd end;
  end.status = status;
  end.exit = exit;
  MemberLine& line = display_->member(a.task.index);
  MemberResult scratch;  // attempts ended after the round returned (the destructor's kill)
  MemberResult& result = results_ != nullptr ? (*results_)[a.task.index] : scratch;
  result.attempt = a.number;
  if (status == AttemptStatus::kDone) {
    json metrics = json::object();
    if (a.task.member->is_script()) {
      if (a.train_done.contains("metrics") && a.train_done["metrics"].is_object()) {
        metrics = a.train_done["metrics"];
      }
      if (JsonNumberField(a.train_done, "seconds")) metrics["seconds"] = a.train_done["seconds"];
      // Only numbers are metrics; a script's odd values stay in its log.
      for (auto it = metrics.begin(); it != metrics.end();) {
        it = it->is_number() || it->is_boolean() ? std::next(it) : metrics.erase(it);
      }
    }
    for (const char* key :
         {"seconds", "samples", "best_epoch", "stopped_early", "parameters", "step_times"}) {
      if (a.train_done.contains(key)) metrics[key] = a.train_done[key];
    }
    metrics["predict_seconds"] = a.predict_seconds;
    metrics["attempt_seconds"] = Seconds(now - a.started);
    end.metrics_json = metrics.dump();
    end.checkpoint = a.dir + (a.task.member->is_script() ? "/checkpoint" : "/checkpoint.pt");
    bool pool = a.task.predict_pool || a.task.member->is_script();
    json predictions = {{"test", a.dir + "/predictions-test.npy"}};
    if (pool) predictions["pool"] = a.dir + "/predictions-pool.npy";
    end.predictions_json = predictions.dump();
    result.done = true;
    result.error.clear();
    result.checkpoint = end.checkpoint;
    result.predictions_pool = pool ? a.dir + "/predictions-pool.npy" : "";
    result.predictions_test = a.dir + "/predictions-test.npy";
    result.train_seconds = JsonNumberField(a.train_done, "seconds").value_or(0);
    result.predict_seconds = a.predict_seconds;
    if (stats_ != nullptr) stats_->predict_s += a.predict_seconds;
    line.state = MemberLine::State::kDone;
    line.note = fmt::format("in {}", FormatDuration(Seconds(now - a.started)));
  } else {
    result.done = false;
    result.error = exit;
    line.retries += 1;
    MemberTask retry = a.task;
    retry.next_attempt = a.number + 1;
    retry.attempts_left -= 1;
    if (!kill_all_reason_.empty()) {
      line.state = MemberLine::State::kFailed;
      line.note = exit;
    } else if (retry.attempts_left > 0) {
      line.state = MemberLine::State::kQueued;
      display_->Note(fmt::format("round {}: {} attempt {} on {} failed: {}; retrying", round_,
                                 a.task.member->name, a.number, slot.name, exit));
      queue_.push_back(retry);
    } else {
      line.state = MemberLine::State::kFailed;
      line.note = exit;
      display_->Note(fmt::format("round {}: {} attempt {} on {} failed: {}; no retries left",
                                 round_, a.task.member->name, a.number, slot.name, exit));
    }
  }
  Status st = journal_->FinishAttempt(a.id, end);
  if (!st.ok() && fatal_.ok()) fatal_ = st;
  // A worker that failed its command but lives serves the next member; a dead one is gone.
}

void Scheduler::CheckDeadlines() {
  if (options_.attempt_timeout.count() <= 0) return;
  auto now = Clock::now();
  for (auto& slot : slots_) {
    if (!slot->attempt || !slot->attempt->timeout_reason.empty()) continue;
    launch::Subprocess* process =
        slot->attempt->script != nullptr ? slot->attempt->script : slot->worker;
    if (process == nullptr) continue;
    if (now - slot->attempt->started > options_.attempt_timeout) {
      slot->attempt->timeout_reason =
          fmt::format("killed: the attempt ran longer than attempt_timeout_s ({} s)",
                      std::chrono::duration<double>(options_.attempt_timeout).count());
      (void)process->Terminate();
    }
  }
}

Status Scheduler::PollOnce(std::chrono::milliseconds timeout) {
  Handler handler(this);
  COHORT_ASSIGN_OR_RETURN(auto polled, set_->Poll(timeout, handler));
  if (polled.interrupts > 0) {
    interrupts_ += polled.interrupts;
    if (interrupts_ == polled.interrupts) {
      display_->Note(
          "interrupted: finishing the running round, then stopping (Ctrl-C again to stop now)");
    }
  }
  CheckDeadlines();
  display_->Refresh();
  return fatal_;
}

void Scheduler::KillAll(const std::string& why) {
  // Attempts ended here end for `why`, not for the signal that carried it out, and are not
  // retried: what they were doing was not their fault.
  kill_all_reason_ = why;
  for (auto& slot : slots_) {
    if (slot->worker != nullptr) (void)slot->worker->Kill();
    if (slot->attempt && slot->attempt->script != nullptr) (void)slot->attempt->script->Kill();
  }
  if (program_ != nullptr) (void)program_->Kill();
  // Reap them, so every attempt gets its end in the journal.
  Handler handler(this);
  auto deadline = Clock::now() + options_.kill_grace + std::chrono::seconds(5);
  while (set_ && !set_->empty() && Clock::now() < deadline) {
    if (!set_->Poll(std::chrono::milliseconds(100), handler).ok()) break;
  }
  for (auto& slot : slots_) {
    if (slot->attempt) EndAttempt(*slot, AttemptStatus::kKilled, why);
  }
  kill_all_reason_.clear();
}

Status Scheduler::RunRound(int64_t round, uint64_t generation, const LoopConfig& config,
                           std::vector<MemberTask> tasks, std::vector<MemberResult>* results,
                           PhaseStats* stats) {
  round_ = round;
  generation_ = generation;
  config_ = &config;
  {
    COHORT_ASSIGN_OR_RETURN(auto snap, store::Snapshot::Open(paths_.store(), generation));
    COHORT_ASSIGN_OR_RETURN(const store::Table* pool, snap->table(config.store.pool));
    COHORT_ASSIGN_OR_RETURN(const store::Table* test, snap->table(config.store.test));
    pool_rows_ = pool->size();
    test_rows_ = test->size();
  }
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
  auto phase_start = Clock::now();
  for (auto& slot : slots_) {
    slot->idle_s = 0;
    slot->idle_since = phase_start;
  }
  while (true) {
    if (!fatal_.ok()) break;
    for (auto& slot : slots_) {
      if (slot->attempt || queue_.empty() || interrupts_ >= 2) continue;
      MemberTask task = queue_.front();
      queue_.erase(queue_.begin());
      Status st = StartAttempt(*slot, std::move(task));
      if (!st.ok()) {
        fatal_ = st;
        break;
      }
    }
    bool running = std::any_of(slots_.begin(), slots_.end(),
                               [](const auto& s) { return s->attempt.has_value(); });
    if (!running && (queue_.empty() || interrupts_ >= 2)) break;
    Status st = PollOnce(std::chrono::milliseconds(250));
    if (!st.ok() && fatal_.ok()) fatal_ = st;
    if (interrupts_ >= 2) {
      display_->Note("interrupted twice: stopping the workers now");
      KillAll("interrupted (Ctrl-C)");
      queue_.clear();
      break;
    }
  }
  auto phase_end = Clock::now();
  stats->wall_s = Seconds(phase_end - phase_start);
  for (auto& slot : slots_) {
    if (!slot->attempt) slot->idle_s += Seconds(phase_end - slot->idle_since);
    stats->idle_s += slot->idle_s;
  }
  display_->Refresh(true);
  if (!fatal_.ok()) {
    Status st = fatal_;
    KillAll("the controller stopped: " + st.message());
    stats_ = nullptr;
    return st;
  }
  stats_ = nullptr;
  if (interrupts_ >= 2) return Status::Aborted("interrupted");
  return Status::OK();
}

Result<launch::ExitInfo> Scheduler::RunProgram(const launch::SpawnSpec& spec) {
  COHORT_ASSIGN_OR_RETURN(program_, set_->Spawn(spec));
  program_exit_.reset();
  while (!program_exit_) {
    Handler handler(this);
    handler.program_log = spec.stderr_path;
    COHORT_ASSIGN_OR_RETURN(auto polled, set_->Poll(std::chrono::milliseconds(250), handler));
    if (polled.interrupts > 0 && interrupts_ == 0) {
      display_->Note(
          "interrupted: finishing the round once the oracle is done, then stopping "
          "(Ctrl-C again to stop now)");
    }
    interrupts_ += polled.interrupts;
    if (interrupts_ >= 2 && program_ != nullptr) (void)program_->Kill();
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
    if (slot->worker != nullptr && !slot->attempt) {
      (void)slot->worker->Write(R"({"op":"shutdown","id":"shutdown"})");
      slot->worker->CloseStdin();
    }
  }
  Handler handler(this);
  auto deadline = Clock::now() + grace;
  while (!set_->empty() && Clock::now() < deadline) {
    if (!set_->Poll(std::chrono::milliseconds(50), handler).ok()) break;
  }
  KillAll("the controller is exiting");
}

}  // namespace cohort::loop
