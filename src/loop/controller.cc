#include "loop/controller.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include "common/json_text.h"
#include "loop/acquisition.h"
#include "loop/config.h"
#include "loop/crash_point.h"
#include "loop/ensemble_metrics.h"
#include "loop/journal.h"
#include "loop/oracle.h"
#include "loop/run_dir.h"
#include "loop/scheduler.h"
#include "model/spec.h"
#include "model/task.h"
#include "store/import.h"
#include "store/snapshot.h"
#include "store/store.h"
#include "store/transaction.h"

namespace cohort::loop {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

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

// "loop.toml:23: member[2]" for messages about a member.
std::string MemberWhere(const LoopConfig& config, size_t index) {
  return fmt::format("{}:{}: member[{}]", config.path, config.members[index].line, index + 1);
}

// The checks that need the store: tables, their kinds, and every member's model against the
// train table. Run before any worker starts.
Status CheckConfigAgainstStore(const LoopConfig& config, const store::Snapshot& snap) {
  const std::string where = config.path + ": store";
  std::string store_desc = fmt::format("{} generation {}", snap.dir(), snap.generation());
  for (const std::string* name : {&config.store.train, &config.store.pool, &config.store.test}) {
    if (!snap.has_table(*name)) {
      std::string tables;
      for (const std::string& t : snap.table_names()) tables += (tables.empty() ? "" : ", ") + t;
      return Status::InvalidArgument(fmt::format("{}: table '{}' is not in {} (its tables: {})",
                                                 where, *name, store_desc, tables));
    }
  }
  const store::Table* train = *snap.table(config.store.train);
  const store::Table* pool = *snap.table(config.store.pool);
  const store::Table* test = *snap.table(config.store.test);
  if (train->schema().label_kind != store::LabelKind::kClass) {
    return Status::InvalidArgument(fmt::format(
        "{}.train: table '{}' has {}: the loop's acquisition and metrics need class labels", where,
        config.store.train, train->schema().ToString()));
  }
  if (test->schema().label_kind != store::LabelKind::kClass) {
    return Status::InvalidArgument(fmt::format("{}.test: table '{}' has {}: it needs class labels",
                                               where, config.store.test,
                                               test->schema().ToString()));
  }
  for (const store::Table* t : {pool, test}) {
    if (t->schema().feature_dtype != train->schema().feature_dtype ||
        t->schema().feature_shape != train->schema().feature_shape) {
      return Status::InvalidArgument(
          fmt::format("{}: table '{}' has {} but the train table '{}' has {}", where, t->name(),
                      t->schema().ToString(), train->name(), train->schema().ToString()));
    }
  }
  if (config.oracle.kind == OracleConfig::Kind::kHiddenLabels && !pool->schema().has_labels()) {
    return Status::InvalidArgument(fmt::format(
        "{}: oracle: hidden_labels needs the pool table '{}' to store labels, but it has {}",
        config.path, config.store.pool, pool->schema().ToString()));
  }
  if (train->size() == 0) {
    return Status::InvalidArgument(
        fmt::format("{}.train: table '{}' is empty in {}", where, config.store.train, store_desc));
  }
  for (size_t i = 0; i < config.members.size(); ++i) {
    const MemberConfig& m = config.members[i];
    if (m.is_script()) continue;  // its settings are the script's own
    auto meta = model::DescribeTask(*train, m.train);
    if (!meta.ok()) {
      return Status::InvalidArgument(MemberWhere(config, i) + ": " + meta.status().message());
    }
    auto spec = model::ParseModelSpec(m.train.model, m.name);
    if (!spec.ok()) {
      return Status::InvalidArgument(MemberWhere(config, i) + ".model: " + spec.status().message());
    }
    auto shapes = model::InferShapes(*spec, meta->input_shape, meta->outputs, m.name);
    if (!shapes.ok()) {
      return Status::InvalidArgument(MemberWhere(config, i) +
                                     ".model: " + shapes.status().message());
    }
  }
  return Status::OK();
}

// The members' probabilities for a table, stacked [member][sample][class].
struct StackedPredictions {
  std::vector<float> data;
  int64_t members = 0, samples = 0, classes = 0;
  std::vector<size_t> member_index;  // config index of each stacked member
};

Result<StackedPredictions> LoadPredictions(const RunPaths& paths,
                                           const std::vector<MemberResult>& results, bool pool,
                                           uint64_t rows) {
  StackedPredictions s;
  s.samples = static_cast<int64_t>(rows);
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].done) continue;
    std::string path =
        paths.Absolute(pool ? results[i].predictions_pool : results[i].predictions_test);
    COHORT_ASSIGN_OR_RETURN(store::HostArray a, store::ReadNpyFile(path));
    if (a.dtype != store::Dtype::kFloat32 || a.shape.size() != 2 || a.shape[0] != rows) {
      return Status::InvalidArgument(
          fmt::format("{}: expected float32 predictions of shape ({}, classes), got {} {}", path,
                      rows, store::DtypeName(a.dtype), store::DimsToString(a.shape)));
    }
    auto classes = static_cast<int64_t>(a.shape[1]);
    if (s.members > 0 && classes != s.classes) {
      return Status::InvalidArgument(
          fmt::format("{}: {} classes where other members have {}", path, classes, s.classes));
    }
    s.classes = classes;
    size_t old = s.data.size();
    s.data.resize(old + a.data.size() / sizeof(float));
    std::memcpy(s.data.data() + old, a.data.data(), a.data.size());
    s.members += 1;
    s.member_index.push_back(i);
  }
  return s;
}

std::vector<int64_t> ClassLabelsOf(const store::Table& table) {
  store::HostArray labels = table.ReadLabels();
  std::vector<int64_t> out(table.size());
  std::memcpy(out.data(), labels.data.data(), out.size() * sizeof(int64_t));
  return out;
}

bool TargetReached(const TargetMetric& target, const ClassificationMetrics& m) {
  double value = target.metric == "accuracy" ? m.accuracy
                 : target.metric == "nll"    ? m.nll
                 : target.metric == "brier"  ? m.brier
                 : target.metric == "ece"    ? m.ece
                                             : NAN;
  if (std::isnan(value)) return false;
  return target.higher_is_better ? value >= target.value : value <= target.value;
}

uint64_t RoundSeed(uint64_t seed, int64_t round) {
  // splitmix64 of (seed, round), so each round draws afresh but reproducibly.
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(round + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

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
  Status Prepare();
  // Trains the round's members that have no finished attempt. OK with results filled.
  Status TrainMembers(int64_t round, uint64_t generation, bool retry_failed,
                      std::vector<MemberResult>* results, PhaseStats* stats);
  // Whether a round on `generation` is known to be the last before it trains (max_rounds,
  // a spent budget, an empty pool), so its members need not predict the pool.
  Result<bool> KnownLastRound(int64_t round, uint64_t generation);
  // A round continued past what was to be its end trains again the native members that did
  // not predict the pool (deterministically the same members), this time predicting it.
  Status PredictMissingPool(int64_t round, uint64_t generation, std::vector<MemberResult>* results);
  // Everything after training: metrics, stop rules, acquisition, labels, commit. Sets
  // *next_generation and returns whether the run goes on. `reconsider`: the round was
  // finished as the last one; only continue it if the stop rules now allow.
  Result<bool> FinishRound(int64_t round, uint64_t generation,
                           const std::vector<MemberResult>& results, PhaseStats stats,
                           bool reconsider, uint64_t* next_generation);
  Result<std::vector<MemberResult>> ResultsFromJournal(int64_t round);
  Status StopRun(RunStatus status);
  Result<RunOutcome> RunRounds();

  const RunOptions& options_;
  LoopConfig config_;
  std::string config_text_;
  std::unique_ptr<Display> display_;
  OpenRun run_;
  std::unique_ptr<Scheduler> scheduler_;
  store::Env* store_env_ = nullptr;
  uint64_t starting_labels_ = 0;
  std::optional<double> last_accuracy_;
  std::string stop_reason_;
  PhaseTimings reconsidered_timings_;  // the training timings of a round looked at again
};

Status Controller::Prepare() {
  COHORT_ASSIGN_OR_RETURN(config_, LoadLoopConfig(options_.config_path));
  {
    std::ifstream in(options_.config_path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    config_text_ = ss.str();
  }
  int cpus = CpuCount();
  if (config_.devices_auto) {
    auto devices = launch::ResolveAutoDevices("auto", VisibleCudaDevices(), cpus,
                                              config_.threads_per_cpu_device);
    if (!devices.ok()) return devices.status().WithContext(config_.path + ": devices");
    config_.devices = *devices;
  }
  store_env_ = CrashEnv();
  // A new run is checked against its source before anything is created; a resumed one
  // against its own store.
  bool exists = fs::exists(config_.run_dir + "/loop.toml");
  std::string store_dir = exists ? config_.run_dir + "/store" : config_.store.source;
  auto snap = store::Snapshot::Open(
      store_dir, exists ? std::nullopt : config_.store.source_generation, store_env_);
  if (!snap.ok()) {
    return snap.status().WithContext(exists ? "the run's store" : config_.path + ": store.source");
  }
  COHORT_RETURN_IF_ERROR(CheckConfigAgainstStore(config_, **snap));

  display_ = std::make_unique<Display>(options_.out, options_.display);
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
  COHORT_RETURN_IF_ERROR(run_.journal->SetRunStatus(run_.run.id, RunStatus::kRunning));

  SchedulerOptions so;
  so.devices = config_.devices;
  so.threads_per_cpu_device = config_.threads_per_cpu_device;
  so.members_per_device = config_.members_per_device;
  so.cpu_count = cpus;
  so.member_binary = options_.member_binary;
  so.heartbeat_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(config_.failure.heartbeat_timeout_s * 1000));
  so.attempt_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(config_.failure.attempt_timeout_s * 1000));
  so.kill_grace = std::chrono::milliseconds(5000);
  COHORT_ASSIGN_OR_RETURN(scheduler_, Scheduler::Create(so, run_.paths, run_.journal.get(),
                                                        run_.run.id, display_.get()));

  COHORT_ASSIGN_OR_RETURN(
      auto first,
      store::Snapshot::Open(run_.paths.store(), run_.run.source_generation, store_env_));
  COHORT_ASSIGN_OR_RETURN(const store::Table* train, first->table(config_.store.train));
  starting_labels_ = train->size();
  return Status::OK();
}

Result<std::vector<MemberResult>> Controller::ResultsFromJournal(int64_t round) {
  std::vector<MemberResult> results(config_.members.size());
  COHORT_ASSIGN_OR_RETURN(auto attempts, run_.journal->AttemptsOfRound(run_.run.id, round));
  for (const AttemptRecord& a : attempts) {
    if (a.status != AttemptStatus::kDone) continue;
    for (size_t i = 0; i < config_.members.size(); ++i) {
      if (config_.members[i].name != a.member) continue;
      MemberResult& r = results[i];
      r.done = true;
      r.attempt = a.attempt;
      r.checkpoint = a.checkpoint.value_or("");
      json predictions = json::parse(a.predictions_json.value_or("{}"), nullptr, false);
      r.predictions_pool = JsonStringField(predictions, "pool");
      r.predictions_test = JsonStringField(predictions, "test");
      json metrics = json::parse(a.metrics_json.value_or("{}"), nullptr, false);
      r.train_seconds = JsonNumberField(metrics, "seconds").value_or(0);
      r.predict_seconds = JsonNumberField(metrics, "predict_seconds").value_or(0);
    }
  }
  return results;
}

Result<bool> Controller::KnownLastRound(int64_t round, uint64_t generation) {
  if (config_.stop.max_rounds && round + 1 >= *config_.stop.max_rounds) return true;
  COHORT_ASSIGN_OR_RETURN(auto snap,
                          store::Snapshot::Open(run_.paths.store(), generation, store_env_));
  COHORT_ASSIGN_OR_RETURN(const store::Table* train, snap->table(config_.store.train));
  COHORT_ASSIGN_OR_RETURN(const store::Table* pool, snap->table(config_.store.pool));
  int64_t used = static_cast<int64_t>(train->size()) - static_cast<int64_t>(starting_labels_);
  if (config_.stop.label_budget && used >= *config_.stop.label_budget) return true;
  return pool->size() == 0 && config_.stop.stop_when_pool_exhausted;
}

Status Controller::PredictMissingPool(int64_t round, uint64_t generation,
                                      std::vector<MemberResult>* results) {
  std::vector<MemberTask> tasks;
  COHORT_ASSIGN_OR_RETURN(auto attempts, run_.journal->AttemptsOfRound(run_.run.id, round));
  for (size_t i = 0; i < results->size(); ++i) {
    if (!(*results)[i].done || !(*results)[i].predictions_pool.empty()) continue;
    MemberTask task;
    task.index = i;
    task.member = &config_.members[i];
    task.next_attempt = 1;
    for (const AttemptRecord& a : attempts) {
      if (a.member == config_.members[i].name)
        task.next_attempt = std::max(task.next_attempt, a.attempt + 1);
    }
    task.attempts_left = static_cast<int>(1 + config_.failure.retries);
    tasks.push_back(task);
  }
  if (tasks.empty()) return Status::OK();
  display_->Note(
      fmt::format("round {}: the run goes on past its planned end: {} member(s) "
                  "train again to predict the pool",
                  round, tasks.size()));
  std::vector<std::string> names;
  for (const MemberConfig& m : config_.members) names.push_back(m.name);
  display_->StartRound(round, generation, 0, last_accuracy_, names);
  PhaseStats stats;
  std::vector<MemberResult> fresh(results->size());
  COHORT_RETURN_IF_ERROR(scheduler_->RunRound(round, generation, config_, tasks, &fresh, &stats));
  for (const MemberTask& t : tasks) {
    if (!fresh[t.index].done) {
      return Status::Aborted(fmt::format("round {}: {} could not predict the pool: {}", round,
                                         config_.members[t.index].name, fresh[t.index].error));
    }
    (*results)[t.index] = fresh[t.index];
  }
  return Status::OK();
}

Status Controller::TrainMembers(int64_t round, uint64_t generation, bool retry_failed,
                                std::vector<MemberResult>* results, PhaseStats* stats) {
  COHORT_ASSIGN_OR_RETURN(*results, ResultsFromJournal(round));
  COHORT_ASSIGN_OR_RETURN(bool last, KnownLastRound(round, generation));
  COHORT_ASSIGN_OR_RETURN(auto attempts, run_.journal->AttemptsOfRound(run_.run.id, round));
  std::vector<MemberResult> previous;
  bool any_warm = std::any_of(config_.members.begin(), config_.members.end(),
                              [](const MemberConfig& m) { return m.warm_start; });
  if (any_warm && round > 0) {
    COHORT_ASSIGN_OR_RETURN(previous, ResultsFromJournal(round - 1));
  }

  std::vector<std::string> names;
  for (const MemberConfig& m : config_.members) names.push_back(m.name);
  COHORT_ASSIGN_OR_RETURN(auto snap,
                          store::Snapshot::Open(run_.paths.store(), generation, store_env_));
  COHORT_ASSIGN_OR_RETURN(const store::Table* train, snap->table(config_.store.train));
  display_->StartRound(round, generation, static_cast<int64_t>(train->size()), last_accuracy_,
                       names);

  std::vector<MemberTask> tasks;
  for (size_t i = 0; i < config_.members.size(); ++i) {
    MemberLine& line = display_->member(i);
    if ((*results)[i].done) {
      line.state = MemberLine::State::kDone;
      line.note = "(finished before the resume)";
      continue;
    }
    MemberTask task;
    task.index = i;
    task.member = &config_.members[i];
    task.predict_pool = !last;
    int last_attempt = 0;
    int failures = 0;
    for (const AttemptRecord& a : attempts) {
      if (a.member != config_.members[i].name) continue;
      last_attempt = std::max(last_attempt, a.attempt);
      // An attempt the controller's own death ended is not the member's failure.
      bool lost = a.status == AttemptStatus::kRunning ||
                  (a.exit && a.exit->rfind("interrupted", 0) == 0) ||
                  (a.exit && a.exit->rfind("the controller", 0) == 0);
      if (!lost) ++failures;
    }
    task.next_attempt = last_attempt + 1;
    task.attempts_left = static_cast<int>(1 + config_.failure.retries) - failures;
    line.retries = failures;
    if (task.attempts_left <= 0) {
      // Out of attempts before the controller stopped: the round went on without it, and a
      // resume must not change that. Only rerunning a failed round tries it again.
      if (!retry_failed) {
        for (const AttemptRecord& a : attempts) {
          if (a.member == config_.members[i].name && a.exit) (*results)[i].error = *a.exit;
        }
        line.state = MemberLine::State::kFailed;
        line.note = (*results)[i].error;
        continue;
      }
      task.attempts_left = 1;
    }
    if (config_.members[i].warm_start && !previous.empty() && previous[i].done) {
      // A script need not have written its checkpoint; then it starts afresh.
      std::string checkpoint = run_.paths.Absolute(previous[i].checkpoint);
      if (fs::exists(checkpoint)) task.warm_start_from = checkpoint;
    }
    tasks.push_back(task);
  }
  // Attempts a killed controller left running are over.
  for (const AttemptRecord& a : attempts) {
    if (a.status != AttemptStatus::kRunning) continue;
    AttemptEnd end;
    end.status = AttemptStatus::kKilled;
    end.exit = "the controller stopped during this attempt";
    COHORT_RETURN_IF_ERROR(run_.journal->FinishAttempt(a.id, end));
  }
  if (tasks.empty()) return Status::OK();
  // Longest first, by what each member took last round: the round ends when its slowest
  // device does, and starting the long members first evens the devices out. Which member
  // runs where never changes a result.
  if (round > 0) {
    COHORT_ASSIGN_OR_RETURN(auto before, run_.journal->AttemptsOfRound(run_.run.id, round - 1));
    std::map<std::string, double> took;
    for (const AttemptRecord& a : before) {
      if (a.status != AttemptStatus::kDone || !a.metrics_json) continue;
      auto seconds =
          JsonNumberField(json::parse(*a.metrics_json, nullptr, false), "attempt_seconds");
      if (seconds) took[a.member] = *seconds;
    }
    std::stable_sort(tasks.begin(), tasks.end(), [&](const MemberTask& x, const MemberTask& y) {
      return took[x.member->name] > took[y.member->name];
    });
  }
  return scheduler_->RunRound(round, generation, config_, std::move(tasks), results, stats);
}

Result<bool> Controller::FinishRound(int64_t round, uint64_t generation,
                                     const std::vector<MemberResult>& results, PhaseStats stats,
                                     bool reconsider, uint64_t* next_generation) {
  Journal& journal = *run_.journal;
  const int64_t run_id = run_.run.id;
  COHORT_ASSIGN_OR_RETURN(auto snap,
                          store::Snapshot::Open(run_.paths.store(), generation, store_env_));
  COHORT_ASSIGN_OR_RETURN(const store::Table* train, snap->table(config_.store.train));
  COHORT_ASSIGN_OR_RETURN(const store::Table* pool, snap->table(config_.store.pool));
  COHORT_ASSIGN_OR_RETURN(const store::Table* test, snap->table(config_.store.test));

  // Ensemble test metrics.
  COHORT_ASSIGN_OR_RETURN(StackedPredictions test_pred,
                          LoadPredictions(run_.paths, results, false, test->size()));
  COHORT_ASSIGN_OR_RETURN(
      auto test_view, MakeEnsemblePredictions(test_pred.data, test_pred.members, test_pred.samples,
                                              test_pred.classes));
  COHORT_ASSIGN_OR_RETURN(EnsembleMetrics metrics,
                          ComputeEnsembleMetrics(test_view, ClassLabelsOf(*test)));
  if (!reconsider) {
    for (size_t m = 0; m < test_pred.member_index.size(); ++m) {
      COHORT_RETURN_IF_ERROR(journal.RecordMemberMetrics(
          run_id, round, config_.members[test_pred.member_index[m]].name,
          metrics.members[m].ToMap()));
    }
  }
  RoundOutcome outcome;
  if (reconsider) {
    outcome.timings = reconsidered_timings_;
  } else {
    outcome.timings.train_s = stats.wall_s;
    for (const MemberResult& r : results)
      outcome.timings.predict_s += r.done ? r.predict_seconds : 0;
    outcome.timings.idle_s = stats.idle_s;
  }
  outcome.test.accuracy = metrics.ensemble.accuracy;
  outcome.test.nll = metrics.ensemble.nll;
  outcome.test.brier = metrics.ensemble.brier;
  outcome.test.ece = metrics.ensemble.ece;
  last_accuracy_ = metrics.ensemble.accuracy;

  // Stop rules.
  int64_t used = static_cast<int64_t>(train->size()) - static_cast<int64_t>(starting_labels_);
  int64_t k = config_.acquisition.batch_size;
  stop_reason_.clear();
  if (config_.stop.target && TargetReached(*config_.stop.target, metrics.ensemble)) {
    stop_reason_ = fmt::format("the ensemble's test {} reached {}", config_.stop.target->metric,
                               config_.stop.target->value);
  } else if (config_.stop.max_rounds && round + 1 >= *config_.stop.max_rounds) {
    stop_reason_ = fmt::format("{} rounds done (stop.max_rounds)", round + 1);
  } else if (config_.stop.label_budget && used >= *config_.stop.label_budget) {
    stop_reason_ = fmt::format("the label budget of {} is spent", *config_.stop.label_budget);
  } else if (pool->size() == 0 && config_.stop.stop_when_pool_exhausted) {
    stop_reason_ = "the pool is exhausted";
  }
  if (config_.stop.label_budget) k = std::min(k, *config_.stop.label_budget - used);
  k = std::min<int64_t>(k, static_cast<int64_t>(pool->size()));
  if (stop_reason_.empty() && k <= 0 && !config_.stop.max_rounds && !config_.stop.target) {
    // Retraining on the same data forever helps nobody.
    stop_reason_ = "nothing is left to acquire";
  }
  std::string summary =
      fmt::format("round {}: {}/{} members, test accuracy {:.4f}, nll {:.4f}, ece {:.4f}", round,
                  test_pred.members, config_.members.size(), metrics.ensemble.accuracy,
                  metrics.ensemble.nll, metrics.ensemble.ece);
  if (!stop_reason_.empty()) {
    if (!reconsider) {
      outcome.output_generation = generation;
      outcome.labels_total = static_cast<int64_t>(train->size());
      COHORT_RETURN_IF_ERROR(journal.FinishRound(run_id, round, outcome));
      display_->Note(summary);
    }
    *next_generation = generation;
    return false;
  }

  // Acquisition.
  std::vector<MemberResult> with_pool = results;
  if (k > 0) COHORT_RETURN_IF_ERROR(PredictMissingPool(round, generation, &with_pool));
  auto t0 = Clock::now();
  COHORT_RETURN_IF_ERROR(journal.SetRoundPhase(run_id, round, RoundStatus::kAcquiring));
  std::vector<uint64_t> ids, rows;
  if (k > 0) {
    COHORT_ASSIGN_OR_RETURN(StackedPredictions pool_pred,
                            LoadPredictions(run_.paths, with_pool, true, pool->size()));
    COHORT_ASSIGN_OR_RETURN(auto pool_view,
                            MakeEnsemblePredictions(pool_pred.data, pool_pred.members,
                                                    pool_pred.samples, pool_pred.classes));
    std::vector<double> scores;
    COHORT_ASSIGN_OR_RETURN(auto picked,
                            Acquire(config_.acquisition.strategy, pool_view, k,
                                    RoundSeed(config_.acquisition.seed, round), &scores));
    std::vector<AcquiredSample> samples;
    for (int64_t index : picked) {
      rows.push_back(static_cast<uint64_t>(index));
      ids.push_back(pool->id(static_cast<uint64_t>(index)));
      samples.push_back({static_cast<int64_t>(ids.back()), scores[static_cast<size_t>(index)]});
    }
    COHORT_RETURN_IF_ERROR(journal.RecordAcquisition(run_id, round, samples));
  }
  MaybeCrash("acquired");
  auto t1 = Clock::now();
  outcome.timings.acquire_s = Seconds(t1 - t0);

  // Has this round's commit already happened (a controller killed right after it)?
  COHORT_ASSIGN_OR_RETURN(auto history, store::ReadHistory(run_.paths.store(), store_env_));
  uint64_t current = history.back().generation;
  uint64_t output = generation;
  if (ids.empty()) {
    // Nothing to label (an empty pool the stop rules let pass): the next round retrains.
  } else if (current == generation) {
    COHORT_RETURN_IF_ERROR(journal.SetRoundPhase(run_id, round, RoundStatus::kLabelling));
    COHORT_ASSIGN_OR_RETURN(auto labels, LabelSamples(config_, run_.paths, round, generation, *pool,
                                                      *train, ids, rows, scheduler_.get()));
    auto t2 = Clock::now();
    outcome.timings.label_s = Seconds(t2 - t1);
    COHORT_RETURN_IF_ERROR(journal.SetRoundPhase(run_id, round, RoundStatus::kCommitting));
    COHORT_ASSIGN_OR_RETURN(auto txn, store::Transaction::Begin(run_.paths.store(), store_env_));
    COHORT_RETURN_IF_ERROR(
        txn->Move(config_.store.pool, config_.store.train, ids, labels ? &*labels : nullptr));
    COHORT_ASSIGN_OR_RETURN(
        output, txn->Commit(fmt::format("cohort run {} round {}: {} samples by {}", config_.name,
                                        round, ids.size(), config_.acquisition.strategy)));
    outcome.timings.commit_s = Seconds(Clock::now() - t2);
  } else if (current == generation + 1) {
    COHORT_ASSIGN_OR_RETURN(
        auto diff, store::DiffGenerations(run_.paths.store(), generation, current, store_env_));
    std::vector<uint64_t> sorted = ids;
    std::sort(sorted.begin(), sorted.end());
    if (diff[config_.store.train].added != sorted || diff[config_.store.pool].removed != sorted) {
      return Status::Corruption(fmt::format(
          "{}: generation {} is not the commit of round {} (it does not move the samples the "
          "round picked from {} to {})",
          run_.paths.store(), current, round, config_.store.pool, config_.store.train));
    }
    output = current;
    display_->Note(
        fmt::format("round {}: its commit (generation {}) was already done", round, current));
  } else {
    return Status::Corruption(fmt::format(
        "{}: CURRENT is generation {} but round {} of the journal trained on generation {}",
        run_.paths.store(), current, round, generation));
  }
  MaybeCrash("committed");

  COHORT_ASSIGN_OR_RETURN(auto out_snap,
                          store::Snapshot::Open(run_.paths.store(), output, store_env_));
  COHORT_ASSIGN_OR_RETURN(const store::Table* out_train, out_snap->table(config_.store.train));
  outcome.output_generation = output;
  outcome.labels_total = static_cast<int64_t>(out_train->size());
  COHORT_RETURN_IF_ERROR(journal.FinishRound(run_id, round, outcome));
  display_->Note(fmt::format("{}; acquired {} by {}, committed generation {} ({} labels)", summary,
                             ids.size(), config_.acquisition.strategy, output,
                             outcome.labels_total));
  *next_generation = output;
  return true;
}

Status Controller::StopRun(RunStatus status) {
  return run_.journal->SetRunStatus(run_.run.id, status);
}

Result<RunOutcome> Controller::RunRounds() {
  COHORT_RETURN_IF_ERROR(Prepare());
  Journal& journal = *run_.journal;
  const int64_t run_id = run_.run.id;
  COHORT_ASSIGN_OR_RETURN(auto rounds, journal.RoundsOf(run_id));
  COHORT_ASSIGN_OR_RETURN(auto history, store::ReadHistory(run_.paths.store(), store_env_));
  const uint64_t current = history.back().generation;

  int64_t round = 0;
  uint64_t generation = current;
  bool reconsider = false;  // the last round finished the run; look at it again
  if (!rounds.empty()) {
    const RoundRecord& last = rounds.back();
    if (last.test.accuracy) last_accuracy_ = last.test.accuracy;
    if (last.status == RoundStatus::kDone) {
      if (last.output_generation.value_or(last.input_generation) == last.input_generation) {
        round = last.round;
        generation = last.input_generation;
        reconsider = true;
        reconsidered_timings_ = last.timings;
      } else {
        round = last.round + 1;
        generation = *last.output_generation;
      }
    } else {
      round = last.round;
      generation = last.input_generation;
    }
    if (current != generation &&
        !(current == generation + 1 && !reconsider && last.status != RoundStatus::kDone)) {
      return Status::Corruption(fmt::format(
          "{}: CURRENT is generation {}, but the journal {} expects generation {}; the store was "
          "changed outside the run",
          run_.paths.store(), current, run_.paths.journal(), generation));
    }
  }

  while (true) {
    std::vector<MemberResult> results;
    PhaseStats stats;
    // Where a resumed round stood: past training, its members' results are final.
    std::optional<RoundStatus> phase;
    if (!rounds.empty() && rounds.back().round == round) phase = rounds.back().status;
    bool trained_already =
        phase && (*phase == RoundStatus::kAcquiring || *phase == RoundStatus::kLabelling ||
                  *phase == RoundStatus::kCommitting);
    if (reconsider || trained_already) {
      COHORT_ASSIGN_OR_RETURN(results, ResultsFromJournal(round));
    } else {
      Status begun = journal.BeginRound(run_id, round, generation);
      if (!begun.ok() && begun.code() != Status::Code::kAlreadyExists) return begun;
      if (begun.ok()) MaybeCrash("round-begun");
      bool retry_failed = phase == RoundStatus::kFailed;
      COHORT_RETURN_IF_ERROR(journal.SetRoundPhase(run_id, round, RoundStatus::kTraining));
      Status trained = TrainMembers(round, generation, retry_failed, &results, &stats);
      if (trained.code() == Status::Code::kAborted) {
        display_->Finish();
        COHORT_RETURN_IF_ERROR(StopRun(RunStatus::kStopped));
        display_->Note(fmt::format("stopped in round {}; run `cohort run {}` again to resume",
                                   round, options_.config_path));
        return RunOutcome::kStopped;
      }
      COHORT_RETURN_IF_ERROR(trained);
      size_t done = std::count_if(results.begin(), results.end(),
                                  [](const MemberResult& r) { return r.done; });
      if (static_cast<int64_t>(done) < config_.failure.min_members) {
        std::string why;
        for (size_t i = 0; i < results.size(); ++i) {
          if (results[i].done) continue;
          why += fmt::format("; {}: {}", config_.members[i].name, results[i].error);
        }
        std::string message =
            fmt::format("round {} failed: {} of {} members finished, min_members is {}{}", round,
                        done, results.size(), config_.failure.min_members, why);
        display_->Finish();
        COHORT_RETURN_IF_ERROR(journal.FailRound(run_id, round, message));
        COHORT_RETURN_IF_ERROR(StopRun(RunStatus::kFailed));
        return Status::Aborted(message + " (rerun to retry the round; member logs are under " +
                               run_.paths.root + "/members)");
      }
    }
    uint64_t next = generation;
    auto finished = FinishRound(round, generation, results, stats, reconsider, &next);
    if (!finished.ok() && scheduler_->interrupts() >= 2) {
      // Ctrl-C twice while the oracle ran: the round stays unfinished and resumable.
      display_->Finish();
      COHORT_RETURN_IF_ERROR(StopRun(RunStatus::kStopped));
      display_->Note(fmt::format("stopped in round {}; run `cohort run {}` again to resume", round,
                                 options_.config_path));
      return RunOutcome::kStopped;
    }
    COHORT_ASSIGN_OR_RETURN(bool more, std::move(finished));
    reconsider = false;
    if (!more) {
      display_->Finish();
      COHORT_RETURN_IF_ERROR(StopRun(RunStatus::kFinished));
      display_->Note(fmt::format("run {} finished: {}; generation {}, test accuracy {:.4f}",
                                 config_.name, stop_reason_, next, last_accuracy_.value_or(0)));
      scheduler_->Shutdown(std::chrono::seconds(5));
      return RunOutcome::kFinished;
    }
    if (scheduler_->interrupts() > 0 || scheduler_->PollSignals() > 0) {
      display_->Finish();
      COHORT_RETURN_IF_ERROR(StopRun(RunStatus::kStopped));
      display_->Note(fmt::format("stopped after round {}; run `cohort run {}` again to resume",
                                 round, options_.config_path));
      scheduler_->Shutdown(std::chrono::seconds(5));
      return RunOutcome::kStopped;
    }
    round += 1;
    generation = next;
  }
}

}  // namespace

Result<RunOutcome> RunLoop(const RunOptions& options) {
  Controller controller(options);
  auto outcome = controller.Run();
  return outcome;
}

}  // namespace cohort::loop
