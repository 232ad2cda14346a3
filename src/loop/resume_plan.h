// Resume planning: what a (re)started controller does next, read from the journal and the
// store's CURRENT, which is the truth about which generation exists.
//
// PlanResume picks the round and generation to run: after a committed round, the next one on
// its output; an unfinished round again on its input (its commit may already be in the store:
// CURRENT one past its input, recognised later); a round that finished the run without a commit
// is looked at again (`reconsider`), so a run continued with looser stop rules goes on from it.
// PlanMembers turns a round's journalled attempts into the attempts still to make: members with
// a finished attempt keep it; the others get a new attempt numbered after their last, with the
// tries their failures left (kFailed and kKilled count; kInterrupted, and attempts a killed
// controller left running, do not).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "loop/config/config.h"
#include "loop/run/journal.h"
#include "loop/schedule/scheduler.h"

namespace cohort::loop {

struct ResumePoint {
  int64_t round = 0;
  uint64_t generation = 0;
  bool reconsider = false;          // the round finished the run; look at it again
  std::optional<RoundRecord> last;  // the journal's last round, if any
};

// `current` is the store's CURRENT generation. Corruption when the store and the journal
// disagree (the store was changed outside the run); the message names both paths.
// `commits_per_round` is how many generations one round may commit (one per update step that
// changes the store): an unfinished round's CURRENT may be that far past its input.
Result<ResumePoint> PlanResume(const std::vector<RoundRecord>& rounds, uint64_t current,
                               const std::string& store_path, const std::string& journal_path,
                               uint64_t commits_per_round = 1);

// The members' finished attempts of a round, indexed like the config's members.
std::vector<MemberResult> ResultsFromAttempts(const LoopConfig& config,
                                              const std::vector<AttemptRecord>& attempts);

// What a round still has to run.
struct MemberPlan {
  std::vector<MemberTask> tasks;  // in config order
  std::vector<int> failures;      // per member: attempts that count against its retries
  // Per member: out of attempts before the controller stopped; the round went on without it
  // and a resume must not change that (only rerunning a failed round tries it again).
  std::vector<bool> out_of_attempts;
};

// `results` holds the round's finished attempts (ResultsFromAttempts); members out of attempts
// get their last exit as error. `retry_failed`: the round failed and is being rerun, so members
// out of attempts get one more. `previous` are the results of the round before, for warm
// starts (checkpoint paths resolved under `run_root`, used when the file exists).
MemberPlan PlanMembers(const LoopConfig& config, const std::vector<AttemptRecord>& attempts,
                       bool retry_failed, bool predict_pool,
                       const std::vector<MemberResult>& previous, const std::string& run_root,
                       std::vector<MemberResult>* results);

// The line a resumed round starts with: "round 2 resumes on generation 3: mlp-a, cnn-b keep
// their finished attempts; mlp-c runs again (attempt 3, 2 tries left after 1 failure); mlp-d
// stays failed (out of attempts)". `plan` and `results` as PlanMembers left them.
std::string DescribeResumedRound(const LoopConfig& config, int64_t round, uint64_t generation,
                                 const MemberPlan& plan, const std::vector<MemberResult>& results);

// The number a new attempt of `member` takes: one past the highest journalled (1 when none).
int NextAttemptNumber(const std::vector<AttemptRecord>& attempts, const std::string& member);

// Whether an attempt's end counts against its member's retries.
bool CountsAsFailure(AttemptStatus status);

// Orders `tasks` longest first by the attempt seconds the members' finished attempts of the
// previous round took (stable; unknown members last): the round ends when its slowest device
// does, and starting the long members first evens the devices out.
void OrderLongestFirst(const std::vector<AttemptRecord>& previous_round,
                       std::vector<MemberTask>* tasks);

}  // namespace cohort::loop
