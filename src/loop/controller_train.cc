// A round's members (controller_impl.h): the plan, training on the scheduler, rechecking
// finished attempts on resume, closing lost ones, and the pool pass a continued round needs.
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
#include "loop/controller_impl.h"
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

namespace fs = std::filesystem;

PredictionShape Controller::ShapeOf(const Tables& t, int64_t round) const {
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

}  // namespace cohort::loop
