#include "loop/controller.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <numeric>
#include <optional>
#include <vector>

#include "common/file_util.h"
#include "common/worker_protocol.h"
#include "launch/local_process_host.h"
#include "launch/slurm_process_host.h"
#include "loop/acquire/round_seeds.h"
#include "loop/config/class_labels.h"
#include "loop/config/config.h"
#include "loop/config/config_check.h"
#include "loop/config/precision_note.h"
#include "loop/ensemble/calibration.h"
#include "loop/ensemble/metrics.h"
#include "loop/ensemble/predictions.h"
#include "loop/ensemble/regression.h"
#include "loop/resume_plan.h"
#include "loop/run/crash_point.h"
#include "loop/run/journal.h"
#include "loop/run/run_dir.h"
#include "loop/schedule/scheduler.h"
#include "loop/stop_rules.h"
#include "loop/update/acquire_commit.h"
#include "loop/update/update_step.h"
#include "store/snapshot.h"
#include "store/store.h"
#include "store/transaction.h"

namespace cohort::loop {

namespace {

namespace fs = std::filesystem;

// Whether the round's update steps include one other than acquire (a command, a built-in).
// Without one, the round acquires exactly as it always has (the default single acquire step).
bool HasCommandSteps(const LoopConfig& config) {
  return std::any_of(config.updates.begin(), config.updates.end(), [](const UpdateStepConfig& u) {
    return u.kind != UpdateStepConfig::Kind::kAcquire;
  });
}

// Whether a step reads the members' pool or train predictions even when the round acquires
// nothing.
bool StepsReadPredictions(const LoopConfig& config) {
  return UpdatesReadTrainPredictions(config) ||
         std::any_of(config.updates.begin(), config.updates.end(), [](const UpdateStepConfig& u) {
           return u.kind == UpdateStepConfig::Kind::kPseudoLabel;
         });
}

// Whether round `round`'s members predict the pool. A round that acquires at random and runs
// no step but the acquisition picks without them, so it skips the pool pass, most of a
// round's prediction cost (cold-start rounds, random baselines): its picks are the same.
bool RoundReadsPoolPredictions(const LoopConfig& config, int64_t round) {
  return config.acquisition.ScoresPredictionsInRound(round) || HasCommandSteps(config);
}

// How many generations a round may commit: one per update step at most.
uint64_t CommitsPerRound(const LoopConfig& config) {
  return HasCommandSteps(config) ? config.updates.size() : 1;
}

constexpr std::chrono::milliseconds kKillGrace{5000};

// CUDA devices this machine shows, without linking a CUDA library: CUDA_VISIBLE_DEVICES when
// set, else the /dev/nvidiaN device files.
int VisibleCudaDevices() {
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    std::string v = visible;
    if (v.empty()) return 0;
    return static_cast<int>(std::count(v.begin(), v.end(), ',')) + 1;
  }
  int n = 0;
  while (fs::exists("/dev/nvidia" + std::to_string(n))) ++n;
  return n;
}

int CpuCount() {
  const auto n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

// A round's wall time from its journalled phases (predicting happens inside training's wall).
double RoundWallSeconds(const PhaseTimings& t) {
  return t.train_s + t.acquire_s + t.label_s + t.commit_s;
}

size_t CountDone(const std::vector<MemberResult>& results) {
  return std::count_if(results.begin(), results.end(),
                       [](const MemberResult& r) { return r.done; });
}

// The tables of one generation the loop works with.
struct Tables {
  std::shared_ptr<const store::Snapshot> snap;
  const store::Table* train = nullptr;
  const store::Table* pool = nullptr;
  const store::Table* test = nullptr;
};

// What a round's ensemble scored on the test table, in every form the round needs.
struct TestScore {
  std::map<std::string, double> ensemble;  // by metric name: what the stop rules read
  EnsembleTestMetrics journal;             // the journal's columns
  std::string summary;                     // "test accuracy 0.9123, nll 0.3012, ece 0.0210"
  std::string headline;                    // "test accuracy 0.9123": the run's last words
  std::optional<double> accuracy;          // classification: the display header's figure
};

class Controller {
 public:
  explicit Controller(const RunOptions& options) : options_(options) {}

  // RunRounds, and a run that ends in an error is journalled as failed.
  Result<RunOutcome> Run() {
    Result<RunOutcome> outcome = Status::Aborted("not run");
    try {
      outcome = RunRounds();
    } catch (const std::exception& e) {
      // A library failure (out of memory, a JSON type error): still one line, still journalled.
      outcome = Status::Aborted(std::string("internal error: ") + e.what());
    }
    if (!outcome.ok() && run_.journal) {
      display_->Finish();
      (void)StopRun(RunStatus::kFailed);
    }
    return outcome;
  }

 private:
  // ---- preparing: config, devices, store check, run directory, scheduler
  Status Prepare();
  Status LoadConfig();
  // launcher = "slurm": the worker slots, from the allocation or slurm.slots.
  Status ResolveSlurmSlots();
  Status CheckStore();
  Status OpenRunDirectory();
  Status StartScheduler();

  // ---- one round
  Result<Tables> OpenTables(uint64_t generation) const;
  RoundState StateOf(int64_t round, const Tables& t) const;
  // A finished attempt's own test accuracy from its predictions, for its display line; none
  // when they cannot be read (the attempt's check says why).
  std::optional<double> MemberTestAccuracy(const AttemptRef& a) const;
  // The mean of the last few finished rounds' wall times (rounds grow with the train table, so
  // the recent ones say more); none before the first.
  std::optional<double> TypicalRoundSeconds() const {
    if (round_seconds_.empty()) return std::nullopt;
    size_t n = std::min<size_t>(3, round_seconds_.size());
    double sum = std::accumulate(round_seconds_.end() - static_cast<std::ptrdiff_t>(n),
                                 round_seconds_.end(), 0.0);
    return sum / static_cast<double>(n);
  }
  PredictionShape ShapeOf(const Tables& t, int64_t round) const {
    const bool train = UpdatesReadTrainPredictions(config_);
    // With pool_sample the members predict only the round's sample of the pool.
    std::vector<uint64_t> pool_ids = t.pool->Ids();
    if (auto sample = PoolSampleOfRound(config_.acquisition.pool_sample, config_.acquisition.seed,
                                        round, t.pool->size())) {
      std::vector<uint64_t> sampled;
      sampled.reserve(sample->size());
      for (uint64_t row : *sample) sampled.push_back(pool_ids[row]);
      pool_ids = std::move(sampled);
    }
    return PredictionShape{.pool_rows = pool_ids.size(),
                           .test_rows = t.test->size(),
                           .train_rows = train ? t.train->size() : 0,
                           .classes = classes_,
                           .pool_ids = std::move(pool_ids),
                           .test_ids = t.test->Ids(),
                           .train_ids = train ? t.train->Ids() : std::vector<uint64_t>{},
                           .task = task_};
  }
  // A resumed round trusts a finished attempt only if its prediction files still pass the
  // checks (a run from before they existed, a file damaged since): one that does not is
  // journalled failed, so the member trains again.
  Status RecheckFinishedAttempts(int64_t round, const Tables& t);
  // Trains the round's members that have no finished attempt. OK with results filled.
  Status TrainMembers(int64_t round, uint64_t generation, bool retry_failed,
                      std::vector<MemberResult>* results, PhaseStats* stats);
  // Journals attempts a killed controller left running as interrupted, and removes the
  // checkpoint temp files unfinished attempts left behind.
  Status CloseLostAttempts(const std::vector<AttemptRecord>& attempts);
  void ShowPlan(const MemberPlan& plan, const std::vector<MemberResult>& results);
  // A round continued past what was to be its end trains again the native members that did
  // not predict the pool (deterministically the same members), this time predicting it.
  Status PredictMissingPool(int64_t round, uint64_t generation, std::vector<MemberResult>* results);
  // Fails the round when fewer than min_members finished; the error says who and why.
  Status CheckEnoughMembers(int64_t round, const std::vector<MemberResult>& results);
  // Everything after training: metrics, stop rules, acquisition, labels, commit. Sets
  // *next_generation and returns whether the run goes on. `reconsider`: the round was
  // finished as the last one; only continue it if the stop rules now allow.
  Result<bool> FinishRound(int64_t round, uint64_t generation,
                           const std::vector<MemberResult>& results, PhaseStats stats,
                           bool reconsider, uint64_t* next_generation);
  // What the acquire and update steps need of the run to label, change and commit its store.
  AcquireContext CommitContext() {
    return AcquireContext{.config = &config_,
                          .paths = &run_.paths,
                          .journal = run_.journal.get(),
                          .run_id = run_.run.id,
                          .env = store_env_,
                          .scheduler = scheduler_.get(),
                          .classes = classes_,
                          .task = task_,
                          .store_lock = store_lock_.get()};
  }
  // The [[update]] steps of a round that goes on, when they include a command step.
  // `k`: what an acquire step picks.
  Result<bool> RunUpdateSteps(int64_t round, const store::Snapshot& round_snap,
                              const std::vector<MemberResult>& results, int64_t k,
                              const std::string& summary, RoundOutcome* outcome,
                              uint64_t* next_generation);
  // What the round's ensemble scored on the test table; journals each member's metrics when
  // `record_members`.
  Result<TestScore> ScoreEnsemble(int64_t round, const Tables& t,
                                  const std::vector<MemberResult>& results, bool record_members);
  Status StopRun(RunStatus status);
  // The run stopped resumably (Ctrl-C, SIGTERM): journalled and said.
  Result<RunOutcome> Stopped(const std::string& where);
  Result<RunOutcome> RunRounds();

  const RunOptions& options_;
  LoopConfig config_;
  std::string config_text_;
  int cpus_ = 1;
  std::unique_ptr<Display> display_;
  std::unique_ptr<DisplayProgress> progress_;
  OpenRun run_;
  std::unique_ptr<launch::ProcessHost> own_host_;
  launch::ProcessHost* host_ = nullptr;
  std::unique_ptr<Scheduler> scheduler_;
  store::Env* store_env_ = nullptr;
  uint64_t starting_labels_ = 0;
  RunTask task_;         // classification, or regression of the train table's targets
  int64_t classes_ = 0;  // RunClassCount (classification)
  // The run keeps its store's writer lock from start to end: a writer outside the run (a
  // `cohort data remove` on it) is refused instead of breaking the run's resume.
  std::unique_ptr<store::FileLock> store_lock_;
  std::optional<double> last_accuracy_;
  std::string last_headline_;  // "test accuracy 0.9123" or "test rmse 0.051" of the last round
  std::string stop_reason_;
  PhaseTimings reconsidered_timings_;  // the training timings of a round looked at again
  // Wall seconds of the run's finished rounds (from the journal and this session): the run
  // line's ETA.
  std::vector<double> round_seconds_;
  std::vector<int64_t> test_labels_;  // the round's test labels, for MemberTestAccuracy
};

Status Controller::LoadConfig() {
  // Read once: the text parsed is the text the run keeps.
  COHORT_ASSIGN_OR_RETURN(config_text_, ReadLoopConfigText(options_.config_path));
  COHORT_ASSIGN_OR_RETURN(config_, ParseLoopConfig(config_text_, options_.config_path));
  for (size_t i = 1; i < config_.updates.size(); ++i) {
    // The acquire step picks pool rows by the members' predictions of the round's generation;
    // after a command step that changed the pool, those rows would be other samples.
    const UpdateStepConfig& u = config_.updates[i];
    if (u.kind == UpdateStepConfig::Kind::kAcquire) {
      return Status::InvalidArgument(fmt::format(
          "{}:{}: update: the acquire step must be the first [[update]] step (it picks pool "
          "rows by the round's predictions, which a step before it could move)",
          config_.path, u.line));
    }
  }
  cpus_ = CpuCount();
  if (config_.launcher == Launcher::kSlurm) return ResolveSlurmSlots();
  if (config_.devices_auto) {
    auto devices = launch::ResolveAutoDevices("auto", VisibleCudaDevices(), cpus_,
                                              config_.threads_per_cpu_device);
    if (!devices.ok()) return devices.status().WithContext(config_.path + ": devices");
    config_.devices = *devices;
  }
  return Status::OK();
}

Status Controller::ResolveSlurmSlots() {
  const launch::SlurmOptions& slurm = config_.slurm;
  int slots = 0;
  if (launch::InSlurmAllocation()) {
    slots = launch::AllocationSlots(slurm);
  } else if (slurm.slots > 0) {
    slots = slurm.slots;
  } else {
    return Status::InvalidArgument(
        config_.path +
        ": slurm.slots: missing: outside a Slurm allocation, say how many steps run at once "
        "(each a job of its own), or run inside one (`cohort sbatch`, salloc)");
  }
  // One slot per worker step; Slurm binds its GPUs (as cuda:0 inside the step) or CPUs.
  config_.devices.clear();
  for (int i = 0; i < slots; ++i) {
    config_.devices.push_back(launch::Device{
        slurm.gpus_per_member > 0 ? launch::Device::Kind::kCuda : launch::Device::Kind::kCpu, i});
  }
  return Status::OK();
}

Status Controller::CheckStore() {
  // A new run is checked against its source before anything is created; a resumed one
  // against its own store.
  bool exists = fs::exists(config_.run_dir + "/loop.toml");
  std::string store_dir = exists ? config_.run_dir + "/store" : config_.store.source;
  auto snap = store::Snapshot::Open(
      store_dir, exists ? std::nullopt : config_.store.source_generation, store_env_);
  if (!snap.ok()) {
    return snap.status().WithContext(exists ? "the run's store" : config_.path + ": store.source");
  }
  if (!exists && options_.verify_source) {
    Status sound = store::VerifyGeneration(store_dir, (*snap)->generation(), store_env_);
    if (!sound.ok()) {
      return sound.WithContext(fmt::format(
          "{}: store.source generation {} is damaged; the run does not clone it (repair the "
          "store, or pick a sound generation with store.generation)",
          config_.path, (*snap)->generation()));
    }
  }
  COHORT_RETURN_IF_ERROR(CheckConfigAgainstStore(config_, **snap));
  task_ = RunTaskOf(**(*snap)->table(config_.store.train));
  if (!task_.regression) {
    COHORT_ASSIGN_OR_RETURN(classes_, RunClassCount(config_, **snap));
  }
  return Status::OK();
}

Status Controller::OpenRunDirectory() {
  // The crash points count the loop's own commits, not the clone.
  COHORT_ASSIGN_OR_RETURN(run_, OpenRunDir(config_, config_text_, store::Env::Default()));
  if (run_.resumed) {
    display_->Note(fmt::format("resuming run {} in {}", config_.name, run_.paths.root));
    for (const ConfigChange& c : run_.changes) {
      display_->Note(fmt::format("  config change: {}: {} -> {}", c.field, c.before, c.after));
    }
  } else {
    display_->Note(
        fmt::format("run {}: {} members on {} device(s), store cloned from {} "
                    "generation {} into {}",
                    config_.name, config_.members.size(), config_.devices.size(),
                    run_.run.source_store, run_.run.source_generation, run_.paths.store()));
  }
  auto lock = store::Transaction::LockStore(run_.paths.store(), store_env_);
  if (!lock.ok()) {
    if (lock.status().code() != Status::Code::kBusy) return lock.status();
    return Status::Busy(fmt::format(
        "{}: a run keeps its store to itself while it runs; stop the other writer first (or "
        "change a copy made with `cohort data clone`)",
        lock.status().message()));
  }
  store_lock_ = std::move(*lock);
  if (auto note = EmulatedBf16Note(config_, CpuHasBf16Kernels())) {
    display_->Note("warning: " + *note);
  }
  COHORT_RETURN_IF_ERROR(run_.journal->SetRunStatus(run_.run.id, RunStatus::kRunning));
  COHORT_ASSIGN_OR_RETURN(
      auto first,
      store::Snapshot::Open(run_.paths.store(), run_.run.source_generation, store_env_));
  COHORT_ASSIGN_OR_RETURN(const store::Table* train, first->table(config_.store.train));
  starting_labels_ = train->size();
  return Status::OK();
}

Status Controller::StartScheduler() {
  host_ = options_.host;
  launch::SlurmProcessHost* slurm = nullptr;
  if (host_ == nullptr && config_.launcher == Launcher::kSlurm) {
    COHORT_ASSIGN_OR_RETURN(auto slurm_host,
                            launch::SlurmProcessHost::Create(config_.slurm, kKillGrace));
    slurm = slurm_host.get();
    own_host_ = std::move(slurm_host);
    host_ = own_host_.get();
  } else if (host_ == nullptr) {
    COHORT_ASSIGN_OR_RETURN(own_host_, launch::LocalProcessHost::Create(kKillGrace));
    host_ = own_host_.get();
  }
  auto millis = [](double seconds) {
    return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  };
  SchedulerOptions so;
  so.devices = config_.devices;
  so.threads_per_cpu_device = config_.threads_per_cpu_device;
  so.members_per_device = config_.members_per_device;
  so.cpu_count = cpus_;
  so.member_binary = options_.member_binary;
  so.heartbeat_timeout = millis(config_.failure.heartbeat_timeout_s);
  so.attempt_timeout = millis(config_.failure.attempt_timeout_s);
  so.kill_grace = kKillGrace;
  so.memory_limit_bytes = static_cast<uint64_t>(config_.failure.memory_limit_gb * (1 << 30));
  so.log_limit_bytes = static_cast<uint64_t>(config_.failure.log_limit_mb) << 20;
  progress_ = std::make_unique<DisplayProgress>(display_.get());
  progress_->member_accuracy = [this](const AttemptRef& a) { return MemberTestAccuracy(a); };
  COHORT_ASSIGN_OR_RETURN(scheduler_, Scheduler::Create(so, run_.paths, run_.journal.get(),
                                                        run_.run.id, host_, progress_.get()));
  if (slurm != nullptr) {
    display_->Note(fmt::format("slurm: {} worker step(s), {} each{}", config_.devices.size(),
                               launch::DescribeRequest(config_.slurm),
                               launch::InSlurmAllocation() ? ", inside the allocation" : ""));
    COHORT_RETURN_IF_ERROR(
        slurm->CheckSharedStore(run_.paths.store(), run_.paths.workers() + "/slurm-probe.log"));
  }
  return Status::OK();
}

Status Controller::Prepare() {
  COHORT_RETURN_IF_ERROR(LoadConfig());
  store_env_ = CrashEnv();
  COHORT_RETURN_IF_ERROR(CheckStore());
  display_ = std::make_unique<Display>(options_.out, options_.display);
  COHORT_RETURN_IF_ERROR(OpenRunDirectory());
  return StartScheduler();
}

Result<Tables> Controller::OpenTables(uint64_t generation) const {
  Tables t;
  COHORT_ASSIGN_OR_RETURN(t.snap,
                          store::Snapshot::Open(run_.paths.store(), generation, store_env_));
  COHORT_ASSIGN_OR_RETURN(t.train, t.snap->table(config_.store.train));
  COHORT_ASSIGN_OR_RETURN(t.pool, t.snap->table(config_.store.pool));
  COHORT_ASSIGN_OR_RETURN(t.test, t.snap->table(config_.store.test));
  return t;
}

std::optional<double> Controller::MemberTestAccuracy(const AttemptRef& a) const {
  if (test_labels_.empty()) return std::nullopt;
  std::string path = run_.paths.Absolute(RunPaths::AttemptFile(
      RunPaths::AttemptDir(a.member_name, a.round, a.attempt), protocol::file::kTestPredictions));
  int64_t width = 0;
  auto probs = ReadMemberPredictions(path, path, test_labels_.size(), classes_, &width);
  if (!probs.ok() || width <= 0) return std::nullopt;
  size_t correct = 0;
  for (size_t i = 0; i < test_labels_.size(); ++i) {
    const float* row = probs->data() + i * static_cast<size_t>(width);
    correct += std::max_element(row, row + width) - row == test_labels_[i];
  }
  return static_cast<double>(correct) / static_cast<double>(test_labels_.size());
}

RoundState Controller::StateOf(int64_t round, const Tables& t) const {
  return RoundState{
      .round = round,
      .labels_used = static_cast<int64_t>(t.train->size()) - static_cast<int64_t>(starting_labels_),
      .pool_size = t.pool->size()};
}

// ---- training

Status Controller::RecheckFinishedAttempts(int64_t round, const Tables& t) {
  COHORT_ASSIGN_OR_RETURN(auto attempts, run_.journal->AttemptsOfRound(run_.run.id, round));
  std::vector<MemberResult> results = ResultsFromAttempts(config_, attempts);
  const PredictionShape shape = ShapeOf(t, round);
  for (const AttemptRecord& a : attempts) {
    if (a.status != AttemptStatus::kDone) continue;
    auto member = std::find_if(config_.members.begin(), config_.members.end(),
                               [&](const MemberConfig& m) { return m.name == a.member; });
    if (member == config_.members.end()) continue;
    const MemberResult& r = results[member - config_.members.begin()];
    if (r.attempt != a.attempt || r.predictions_test.empty()) continue;
    std::string dir = fs::path(run_.paths.Absolute(r.predictions_test)).parent_path().string();
    std::string problem =
        CheckAttemptPredictions(dir, shape, !r.predictions_pool.empty(),
                                !r.predictions_train.empty(), a.member, member->dropout_passes);
    if (problem.empty()) continue;
    AttemptEnd end;
    end.status = AttemptStatus::kFailed;
    end.exit = "its predictions failed the check when the run resumed: " + problem;
    COHORT_RETURN_IF_ERROR(run_.journal->FinishAttempt(a.id, end));
    display_->Note(fmt::format("round {}: {} attempt {} {}", round, a.member, a.attempt, end.exit));
  }
  return Status::OK();
}

Status Controller::CloseLostAttempts(const std::vector<AttemptRecord>& attempts) {
  for (const AttemptRecord& a : attempts) {
    // A worker killed while it wrote its checkpoint (a crash, the controller's SIGKILL) left a
    // temp file in the attempt's directory that nobody will finish.
    if (a.status != AttemptStatus::kDone) {
      RemoveStaleTempFiles(run_.paths.Absolute(RunPaths::AttemptFile(
          RunPaths::AttemptDir(a.member, a.round, a.attempt), protocol::file::kNativeCheckpoint)));
    }
  }
  for (const AttemptRecord& a : attempts) {
    if (a.status != AttemptStatus::kRunning) continue;
    AttemptEnd end;
    end.status = AttemptStatus::kInterrupted;
    end.exit = "the controller stopped during this attempt";
    COHORT_RETURN_IF_ERROR(run_.journal->FinishAttempt(a.id, end));
  }
  return Status::OK();
}

void Controller::ShowPlan(const MemberPlan& plan, const std::vector<MemberResult>& results) {
  for (size_t i = 0; i < config_.members.size(); ++i) {
    MemberLine& line = display_->member(i);
    if (!results[i].done) line.retries = plan.failures[i];
    if (results[i].done) {
      line.state = MemberLine::State::kDone;
      line.note = "(finished before the resume)";
    } else if (plan.out_of_attempts[i]) {
      line.state = MemberLine::State::kFailed;
      line.note = results[i].error;
    }
  }
}

Status Controller::TrainMembers(int64_t round, uint64_t generation, bool retry_failed,
                                std::vector<MemberResult>* results, PhaseStats* stats) {
  Journal& journal = *run_.journal;
  COHORT_ASSIGN_OR_RETURN(Tables t, OpenTables(generation));
  COHORT_RETURN_IF_ERROR(RecheckFinishedAttempts(round, t));
  COHORT_ASSIGN_OR_RETURN(auto attempts, journal.AttemptsOfRound(run_.run.id, round));
  *results = ResultsFromAttempts(config_, attempts);
  const bool predict_pool =
      !KnownLastRound(config_, StateOf(round, t)) && RoundReadsPoolPredictions(config_, round);
  std::vector<MemberResult> previous;
  std::vector<AttemptRecord> previous_attempts;
  if (round > 0) {
    COHORT_ASSIGN_OR_RETURN(previous_attempts, journal.AttemptsOfRound(run_.run.id, round - 1));
    previous = ResultsFromAttempts(config_, previous_attempts);
  }
  MemberPlan plan = PlanMembers(config_, attempts, retry_failed, predict_pool, previous,
                                run_.paths.root, results);
  if (!retry_failed &&
      static_cast<int64_t>(CountDone(*results) + plan.tasks.size()) < config_.failure.min_members) {
    // The round had failed already, though the journal could not say so (its disk was full,
    // the controller died right then): this start retries it, as rerunning a failed round
    // does, instead of failing it again on attempts already counted.
    *results = ResultsFromAttempts(config_, attempts);
    plan = PlanMembers(config_, attempts, true, predict_pool, previous, run_.paths.root, results);
  }

  // A round with journalled attempts is one a stopped controller left: say what goes on.
  if (!attempts.empty()) {
    display_->Note(DescribeResumedRound(config_, round, generation, plan, *results));
  }
  std::vector<std::string> names;
  for (const MemberConfig& m : config_.members) names.push_back(m.name);
  display_->StartRound(round, generation, static_cast<int64_t>(t.train->size()), last_accuracy_,
                       names);
  display_->SetRunPlan(RoundsLeftAfter(config_, StateOf(round, t)), TypicalRoundSeconds());
  test_labels_.clear();
  if (t.test->schema().label_kind == store::LabelKind::kClass)
    test_labels_ = ClassLabelsOf(*t.test);
  ShowPlan(plan, *results);
  COHORT_RETURN_IF_ERROR(CloseLostAttempts(attempts));
  if (plan.tasks.empty()) return Status::OK();
  // Which member runs where never changes a result, only when the round ends.
  OrderLongestFirst(previous_attempts, &plan.tasks);
  return scheduler_->RunRound(round, generation, config_, ShapeOf(t, round), std::move(plan.tasks),
                              results, stats);
}

Status Controller::PredictMissingPool(int64_t round, uint64_t generation,
                                      std::vector<MemberResult>* results) {
  std::vector<MemberTask> tasks;
  COHORT_ASSIGN_OR_RETURN(auto attempts, run_.journal->AttemptsOfRound(run_.run.id, round));
  const bool train = UpdatesReadTrainPredictions(config_);
  for (size_t i = 0; i < results->size(); ++i) {
    const MemberResult& r = (*results)[i];
    if (!r.done || (!r.predictions_pool.empty() && (!train || !r.predictions_train.empty()))) {
      continue;
    }
    MemberTask task;
    task.index = i;
    task.member = &config_.members[i];
    task.predict_train = train;
    task.next_attempt = NextAttemptNumber(attempts, config_.members[i].name);
    task.attempts_left = static_cast<int>(1 + config_.failure.retries);
    tasks.push_back(task);
  }
  if (tasks.empty()) return Status::OK();
  display_->Note(
      fmt::format("round {}: the run goes on past its planned end: {} member(s) "
                  "train again to predict the pool{}",
                  round, tasks.size(), train ? " and the train table" : ""));
  std::vector<std::string> names;
  for (const MemberConfig& m : config_.members) names.push_back(m.name);
  COHORT_ASSIGN_OR_RETURN(Tables t, OpenTables(generation));
  display_->StartRound(round, generation, static_cast<int64_t>(t.train->size()), last_accuracy_,
                       names);
  PhaseStats stats;
  std::vector<MemberResult> fresh(results->size());
  COHORT_RETURN_IF_ERROR(
      scheduler_->RunRound(round, generation, config_, ShapeOf(t, round), tasks, &fresh, &stats));
  for (const MemberTask& task : tasks) {
    if (!fresh[task.index].done) {
      return Status::Aborted(fmt::format("round {}: {} could not predict the pool: {}", round,
                                         config_.members[task.index].name,
                                         fresh[task.index].error));
    }
    (*results)[task.index] = fresh[task.index];
  }
  return Status::OK();
}

Status Controller::CheckEnoughMembers(int64_t round, const std::vector<MemberResult>& results) {
  size_t done = CountDone(results);
  if (static_cast<int64_t>(done) >= config_.failure.min_members) return Status::OK();
  std::string why;
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].done) why += fmt::format("; {}: {}", config_.members[i].name, results[i].error);
  }
  std::string message =
      fmt::format("round {} failed: {} of {} members finished, min_members is {}{}", round, done,
                  results.size(), config_.failure.min_members, why);
  display_->Finish();
  COHORT_RETURN_IF_ERROR(run_.journal->FailRound(run_.run.id, round, message));
  COHORT_RETURN_IF_ERROR(StopRun(RunStatus::kFailed));
  return Status::Aborted(message + " (rerun to retry the round; member logs are under " +
                         run_.paths.root + "/members)");
}

// ---- after training

Result<TestScore> Controller::ScoreEnsemble(int64_t round, const Tables& t,
                                            const std::vector<MemberResult>& results,
                                            bool record_members) {
  std::vector<std::pair<size_t, std::string>> files;
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].done) files.emplace_back(i, run_.paths.Absolute(results[i].predictions_test));
  }
  COHORT_ASSIGN_OR_RETURN(StackedPredictions test, StackPredictions(files, t.test->size(), task_));
  TestScore score;
  std::vector<std::map<std::string, double>> members;
  if (task_.regression) {
    COHORT_ASSIGN_OR_RETURN(
        auto view, MakeRegressionPredictions(test.data, test.members, test.samples, test.outputs));
    COHORT_ASSIGN_OR_RETURN(EnsembleRegressionMetrics metrics,
                            ComputeRegressionMetrics(view, TargetsOf(*t.test)));
    for (const RegressionMetrics& m : metrics.members) members.push_back(m.ToMap());
    const RegressionMetrics& e = metrics.ensemble;
    score.ensemble = e.ToMap();
    score.journal.nll = e.nll;
    score.journal.rmse = e.rmse;
    score.journal.mae = e.mae;
    score.journal.calibration_error = e.calibration_error;
    score.summary = fmt::format("test rmse {:.4g}, mae {:.4g}, nll {:.4f}, calibration {:.4f}",
                                e.rmse, e.mae, e.nll, e.calibration_error);
    score.headline = fmt::format("test rmse {:.4g}", e.rmse);
  } else {
    COHORT_ASSIGN_OR_RETURN(
        auto view, MakeEnsemblePredictions(test.data, test.members, test.samples, test.classes));
    const std::vector<int64_t> labels = ClassLabelsOf(*t.test);
    COHORT_ASSIGN_OR_RETURN(EnsembleMetrics metrics, ComputeEnsembleMetrics(view, labels));
    // A finished member's line shows its own test accuracy while the block is up.
    for (size_t m = 0; m < test.member_index.size(); ++m) {
      if (test.member_index[m] < display_->member_count()) {
        display_->member(test.member_index[m]).accuracy = metrics.members[m].accuracy;
      }
    }
    for (const ClassificationMetrics& m : metrics.members) members.push_back(m.ToMap());
    const ClassificationMetrics& e = metrics.ensemble;
    score.ensemble = e.ToMap();
    score.journal.accuracy = e.accuracy;
    score.journal.nll = e.nll;
    score.journal.brier = e.brier;
    score.journal.ece = e.ece;
    score.accuracy = e.accuracy;
    score.summary =
        fmt::format("test accuracy {:.4f}, nll {:.4f}, ece {:.4f}", e.accuracy, e.nll, e.ece);
    if (test.samples >= 2) {
      // Three one-dimensional fits: about 80 ms for a 10,000-row, 10-class table.
      COHORT_ASSIGN_OR_RETURN(CrossFittedCalibration calibration,
                              CrossFitEnsembleTemperature(view, labels));
      score.journal.temperature = calibration.temperature;
      score.journal.nll_calibrated = calibration.calibrated.nll;
      score.journal.ece_calibrated = calibration.calibrated.ece;
      score.summary += fmt::format(" (calibrated {:.4f}, {:.4f} at temperature {:.3f})",
                                   calibration.calibrated.nll, calibration.calibrated.ece,
                                   calibration.temperature);
    }
    score.headline = fmt::format("test accuracy {:.4f}", e.accuracy);
  }
  if (record_members) {
    for (size_t m = 0; m < test.member_index.size(); ++m) {
      COHORT_RETURN_IF_ERROR(run_.journal->RecordMemberMetrics(
          run_.run.id, round, config_.members[test.member_index[m]].name, members[m]));
    }
  }
  return score;
}

Result<bool> Controller::FinishRound(int64_t round, uint64_t generation,
                                     const std::vector<MemberResult>& results, PhaseStats stats,
                                     bool reconsider, uint64_t* next_generation) {
  Journal& journal = *run_.journal;
  const int64_t run_id = run_.run.id;
  COHORT_ASSIGN_OR_RETURN(Tables t, OpenTables(generation));
  COHORT_ASSIGN_OR_RETURN(TestScore score, ScoreEnsemble(round, t, results, !reconsider));
  RoundOutcome outcome;
  if (reconsider) {
    outcome.timings = reconsidered_timings_;
  } else {
    outcome.timings.train_s = stats.wall_s;
    for (const MemberResult& r : results)
      outcome.timings.predict_s += r.done ? r.predict_seconds : 0;
    outcome.timings.idle_s = stats.idle_s;
  }
  outcome.test = score.journal;
  if (score.accuracy) last_accuracy_ = score.accuracy;
  last_headline_ = score.headline;

  StopDecision decision = DecideAfterRound(config_, StateOf(round, t), score.ensemble);
  stop_reason_ = decision.reason;
  std::string summary = fmt::format("round {}: {}/{} members, {}", round, CountDone(results),
                                    config_.members.size(), score.summary);
  if (decision.stops()) {
    if (!reconsider) {
      outcome.output_generation = generation;
      outcome.labels_total = static_cast<int64_t>(t.train->size());
      COHORT_RETURN_IF_ERROR(journal.FinishRound(run_id, round, outcome));
      display_->Note(summary);
    }
    *next_generation = generation;
    return false;
  }

  std::vector<MemberResult> with_pool = results;
  if ((decision.k > 0 && RoundReadsPoolPredictions(config_, round)) ||
      StepsReadPredictions(config_)) {
    COHORT_RETURN_IF_ERROR(PredictMissingPool(round, generation, &with_pool));
  }
  if (HasCommandSteps(config_)) {
    return RunUpdateSteps(round, *t.snap, with_pool, decision.k, summary, &outcome,
                          next_generation);
  }
  AcquireContext context = CommitContext();
  COHORT_ASSIGN_OR_RETURN(
      AcquireResult acquired,
      AcquireAndCommit(context, round, *t.snap, with_pool, decision.k, &outcome.timings));
  for (const std::string& note : acquired.notes) display_->Note("warning: " + note);
  COHORT_ASSIGN_OR_RETURN(Tables out, OpenTables(acquired.output_generation));
  outcome.output_generation = acquired.output_generation;
  outcome.labels_total = static_cast<int64_t>(out.train->size());
  COHORT_RETURN_IF_ERROR(journal.FinishRound(run_id, round, outcome));
  round_seconds_.push_back(RoundWallSeconds(outcome.timings));
  display_->Note(fmt::format("{}; acquired {} by {}, committed generation {} ({} labels)", summary,
                             acquired.acquired, config_.acquisition.StrategyOfRound(round),
                             acquired.output_generation, outcome.labels_total));
  *next_generation = acquired.output_generation;
  return true;
}

Result<bool> Controller::RunUpdateSteps(int64_t round, const store::Snapshot& round_snap,
                                        const std::vector<MemberResult>& results, int64_t k,
                                        const std::string& summary, RoundOutcome* outcome,
                                        uint64_t* next_generation) {
  Journal& journal = *run_.journal;
  const int64_t run_id = run_.run.id;
  const uint64_t generation = round_snap.generation();
  AcquireContext context = CommitContext();
  uint64_t current = generation;
  std::string said;
  for (size_t i = 0; i < config_.updates.size(); ++i) {
    const UpdateStepConfig& config = config_.updates[i];
    UpdateStepRecord record{.step = static_cast<int64_t>(i + 1),
                            .kind = UpdateKindName(config.kind),
                            .name = config.name,
                            .output_generation = std::nullopt,
                            .summary = "",
                            .counts_json = "{}",
                            .seconds = 0};
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t before = current;
    const char* resumed = "";
    if (config.kind == UpdateStepConfig::Kind::kAcquire) {
      // Always the first step (LoadConfig): it picks by the round's own predictions.
      COHORT_ASSIGN_OR_RETURN(
          AcquireResult acquired,
          AcquireAndCommit(context, round, round_snap, results, k, &outcome->timings));
      for (const std::string& note : acquired.notes) display_->Note("warning: " + note);
      record.summary = fmt::format("acquired {} by {}", acquired.acquired,
                                   config_.acquisition.StrategyOfRound(round));
      if (acquired.acquired > 0) {
        ChangeCounts counts;
        counts.tables[config_.store.pool].moved_out = acquired.acquired;
        counts.tables[config_.store.train].moved_in = acquired.acquired;
        record.counts_json = ChangeCountsJson(counts);
      }
      current = acquired.output_generation;
    } else {
      COHORT_RETURN_IF_ERROR(journal.SetRoundPhase(run_id, round, RoundStatus::kCommitting));
      COHORT_ASSIGN_OR_RETURN(UpdateStepResult step,
                              RunCommandStep(context, round, i, generation, current, results));
      for (const std::string& note : step.notes) display_->Note("warning: " + note);
      record.summary = step.summary;
      record.counts_json = ChangeCountsJson(step.counts);
      current = step.output_generation;
      if (step.resumed) {
        resumed =
            step.committed ? " (committed before the restart)" : " (ended before the restart)";
      }
    }
    record.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (config.kind != UpdateStepConfig::Kind::kAcquire)
      outcome->timings.commit_s += record.seconds;
    if (current != before) record.output_generation = current;
    said += fmt::format("; step {} ({}): {}{}", i + 1, config.name, record.summary, resumed);
    COHORT_RETURN_IF_ERROR(journal.RecordUpdateStep(run_id, round, record));
  }
  COHORT_ASSIGN_OR_RETURN(Tables out, OpenTables(current));
  outcome->output_generation = current;
  outcome->labels_total = static_cast<int64_t>(out.train->size());
  COHORT_RETURN_IF_ERROR(journal.FinishRound(run_id, round, *outcome));
  round_seconds_.push_back(RoundWallSeconds(outcome->timings));
  display_->Note(fmt::format("{}{}; {} ({} train samples)", summary, said,
                             current == generation
                                 ? fmt::format("nothing committed, generation {} again", current)
                                 : fmt::format("committed generation {}", current),
                             outcome->labels_total));
  *next_generation = current;
  return true;
}

Status Controller::StopRun(RunStatus status) {
  return run_.journal->SetRunStatus(run_.run.id, status);
}

Result<RunOutcome> Controller::Stopped(const std::string& where) {
  display_->Finish();
  COHORT_RETURN_IF_ERROR(StopRun(RunStatus::kStopped));
  display_->Note(
      fmt::format("stopped {}; run `cohort run {}` again to resume", where, options_.config_path));
  return RunOutcome::kStopped;
}

Result<RunOutcome> Controller::RunRounds() {
  COHORT_RETURN_IF_ERROR(Prepare());
  Journal& journal = *run_.journal;
  const int64_t run_id = run_.run.id;
  COHORT_ASSIGN_OR_RETURN(auto rounds, journal.RoundsOf(run_id));
  COHORT_ASSIGN_OR_RETURN(auto history, store::ReadHistory(run_.paths.store(), store_env_));
  COHORT_ASSIGN_OR_RETURN(ResumePoint resume,
                          PlanResume(rounds, history.back().generation, run_.paths.store(),
                                     run_.paths.journal(), CommitsPerRound(config_)));
  int64_t round = resume.round;
  uint64_t generation = resume.generation;
  bool reconsider = resume.reconsider;
  // The header keeps the last test accuracy the run measured, though the round resumed has none.
  for (const RoundRecord& r : rounds) {
    if (r.test.accuracy) last_accuracy_ = r.test.accuracy;
    if (r.test.accuracy) last_headline_ = fmt::format("test accuracy {:.4f}", *r.test.accuracy);
    if (r.test.rmse) last_headline_ = fmt::format("test rmse {:.4g}", *r.test.rmse);
    if (r.status == RoundStatus::kDone) round_seconds_.push_back(RoundWallSeconds(r.timings));
  }
  if (resume.last) {
    if (reconsider) reconsidered_timings_ = resume.last->timings;
  }

  while (true) {
    std::vector<MemberResult> results;
    PhaseStats stats;
    // Where a resumed round stood: past training, its members' results are final.
    std::optional<RoundStatus> phase;
    if (resume.last && resume.last->round == round) phase = resume.last->status;
    bool trained_already =
        phase && (*phase == RoundStatus::kAcquiring || *phase == RoundStatus::kLabelling ||
                  *phase == RoundStatus::kCommitting);
    if (reconsider || trained_already) {
      COHORT_ASSIGN_OR_RETURN(auto attempts, journal.AttemptsOfRound(run_id, round));
      results = ResultsFromAttempts(config_, attempts);
    } else {
      Status begun = journal.BeginRound(run_id, round, generation);
      if (!begun.ok() && begun.code() != Status::Code::kAlreadyExists) return begun;
      if (begun.ok()) MaybeCrash("round-begun");
      COHORT_RETURN_IF_ERROR(journal.SetRoundPhase(run_id, round, RoundStatus::kTraining));
      Status trained =
          TrainMembers(round, generation, phase == RoundStatus::kFailed, &results, &stats);
      if (trained.code() == Status::Code::kAborted) {
        return Stopped(fmt::format("in round {}", round));
      }
      COHORT_RETURN_IF_ERROR(trained);
      COHORT_RETURN_IF_ERROR(CheckEnoughMembers(round, results));
    }
    uint64_t next = generation;
    auto finished = FinishRound(round, generation, results, stats, reconsider, &next);
    if (!finished.ok() && scheduler_->interrupts() >= 2) {
      // Ctrl-C twice while the oracle ran: the round stays unfinished and resumable.
      return Stopped(fmt::format("in round {}", round));
    }
    if (!finished.ok() && !reconsider) {
      // The round's own failure (an oracle's bad answer, the ensemble's step): journalled with
      // its message; a rerun keeps the finished members and goes through the step again.
      std::string message = fmt::format("round {} failed: {}", round, finished.status().message());
      (void)journal.FailRound(run_id, round, message);
      return finished.status().WithContext(fmt::format("round {}", round));
    }
    COHORT_ASSIGN_OR_RETURN(bool more, std::move(finished));
    reconsider = false;
    if (!more) {
      display_->Finish();
      COHORT_RETURN_IF_ERROR(StopRun(RunStatus::kFinished));
      display_->Note(fmt::format("run {} finished: {}; generation {}{}", config_.name, stop_reason_,
                                 next, last_headline_.empty() ? "" : ", " + last_headline_));
      scheduler_->Shutdown(std::chrono::seconds(5));
      return RunOutcome::kFinished;
    }
    if (scheduler_->interrupts() > 0 || scheduler_->PollSignals() > 0) {
      auto stopped = Stopped(fmt::format("after round {}", round));
      scheduler_->Shutdown(std::chrono::seconds(5));
      return stopped;
    }
    round += 1;
    generation = next;
  }
}

}  // namespace

Result<RunOutcome> RunLoop(const RunOptions& options) {
  Controller controller(options);
  return controller.Run();
}

}  // namespace cohort::loop
