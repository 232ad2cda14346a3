// The Controller class behind RunLoop (controller.h), as LevelDB's DBImpl is behind DB: one
// object per `cohort run`, driven by the controller thread alone. Its work is split by idea,
// one file each:
//   controller.cc         the round loop: resume point, each round's phases, stopping
//   controller_setup.cc   preparing a run: config, devices, store check, run directory, scheduler
//   controller_train.cc   a round's members: plan, training, rechecks, the missing pool pass
//   controller_finish.cc  after training: the ensemble's score, stop rules, update steps, the
//                         round's close
// Not for use outside src/loop/.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "launch/process_host.h"
#include "loop/config/config.h"
#include "loop/controller.h"
#include "loop/display.h"
#include "loop/ensemble/metrics.h"
#include "loop/ensemble/predictions.h"
#include "loop/resume_plan.h"
#include "loop/run/journal.h"
#include "loop/run/run_dir.h"
#include "loop/schedule/scheduler.h"
#include "loop/stop_rules.h"
#include "loop/update/acquire_commit.h"
#include "store/env.h"
#include "store/snapshot.h"

namespace cohort::loop {

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

// Whether a step reads the members' pool or train predictions even when the round acquires
// nothing.
bool StepsReadPredictions(const LoopConfig& config);
// Whether round `round`'s members predict the pool. A round that acquires at random and runs
// no step but the acquisition picks without them, so it skips the pool pass, most of a
// round's prediction cost (cold-start rounds, random baselines): its picks are the same.
bool RoundReadsPoolPredictions(const LoopConfig& config, int64_t round);
// A round's wall time from its journalled phases (predicting happens inside training's wall).
double RoundWallSeconds(const PhaseTimings& t);
size_t CountDone(const std::vector<MemberResult>& results);

class Controller {
 public:
  explicit Controller(const RunOptions& options) : options_(options) {}

  // RunRounds, and a run that ends in an error is journalled as failed.
  Result<RunOutcome> Run();

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
  // What the round's members predict: the pool (or its round sample), test, and train when a
  // step reads it.
  PredictionShape ShapeOf(const Tables& t, int64_t round) const;

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
  // The [[update]] steps of a round that goes on, in order (`k`: what an acquire step picks);
  // sets outcome's output generation and timings, and returns what the round's line says of
  // them.
  Result<std::string> RunUpdateSteps(int64_t round, const store::Snapshot& round_snap,
                                     const std::vector<MemberResult>& results, int64_t k,
                                     RoundOutcome* outcome);
  // Journals the round done, keeps its wall time for the ETA and says `note`: every round's
  // end, whichever way it ends.
  Status CloseRound(int64_t round, const RoundOutcome& outcome, const std::string& note);
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

}  // namespace cohort::loop
