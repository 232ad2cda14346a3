// The round loop (controller_impl.h): RunLoop, the resume point, each round's phases, stopping.
//
// The helpers below are shared by the controller's files (declared in controller_impl.h).
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

namespace {

// How many generations a round may commit: one per update step at most.
uint64_t CommitsPerRound(const LoopConfig& config) {
  return HasStepsBeyondAcquire(config) ? config.updates.size() : 1;
}

}  // namespace

bool StepsReadPredictions(const LoopConfig& config) {
  return UpdatesReadTrainPredictions(config) ||
         std::any_of(config.updates.begin(), config.updates.end(), [](const UpdateStepConfig& u) {
           return u.kind == UpdateStepConfig::Kind::kPseudoLabel;
         });
}

bool RoundReadsPoolPredictions(const LoopConfig& config, int64_t round) {
  return config.acquisition.ScoresPredictionsInRound(round) || HasStepsBeyondAcquire(config);
}

double RoundWallSeconds(const PhaseTimings& t) {
  return t.train_s + t.acquire_s + t.label_s + t.commit_s;
}

size_t CountDone(const std::vector<MemberResult>& results) {
  return std::count_if(results.begin(), results.end(),
                       [](const MemberResult& r) { return r.done; });
}

Result<RunOutcome> Controller::Run() {
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

Result<RunOutcome> RunLoop(const RunOptions& options) {
  Controller controller(options);
  return controller.Run();
}

}  // namespace cohort::loop
