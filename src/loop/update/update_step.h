// Update steps of kind `command`: a user's program that changes the dataset between rounds by
// writing a change set (docs/updates.md), after the round's members are scored.
//
// The program runs like a command oracle (argv as configured, no shell, in the config file's
// directory, through the scheduler so the workers keep being served), with stdout and stderr
// appended to RUN_DIR/updates/round-RRRR/step-K/step.log and this environment:
//   COHORT_CHANGES_DIR      the change-set directory to write (empty when the program starts)
//   COHORT_PREDICTIONS      a JSON file naming each finished member's prediction files for the
//                           pool and test tables, and the train table's when the step has
//                           predict = ["train"] (rows of the round's trained generation)
//   COHORT_STORE, COHORT_GENERATION (the generation the step changes), COHORT_ROUND,
//   COHORT_RUN_DIR, COHORT_STEP (K, from 1), COHORT_STEP_NAME, COHORT_CLASSES.
// After exit 0 cohort reads the change set (ReadChangeSet, with the run's class count),
// applies it and commits one generation noted "cohort run NAME round R: update step K
// (command NAME): ...". A non-zero exit, a timeout or a bad change set fails the step with one
// line naming it and the file at fault; nothing is committed. An empty change set commits
// nothing.
//
// Resume: a step's commit is recognised by its note in the store's history (past the round's
// input generation), so a controller killed after the commit does not run the program again;
// nor when a later step of the round has committed (this one then ended with no changes);
// killed before it, the change-set directory is cleared and the program runs again.
//
// Thread-safety: used by the controller thread only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "loop/config/config.h"
#include "loop/schedule/scheduler.h"
#include "loop/update/acquire_commit.h"
#include "loop/update/change_set.h"

namespace cohort::loop {

struct UpdateStepResult {
  uint64_t output_generation = 0;  // the input generation when nothing was committed
  bool committed = false;
  // The step had ended before a restart (its commit found, or a later step's): it did not run.
  bool resumed = false;
  std::string summary;             // "train: 2 added, 3 removed" or "no changes"
  ChangeCounts counts;             // what the commit changed (read back from its note when resumed)
  std::vector<std::string> notes;  // what the store repaired when the commit began
};

// Runs command step `step_index` (from 0) of `round`, whose members trained on
// `round_generation`; the step changes `input_generation` (the output of the steps before it).
// `results` are the members' results (their prediction files).
Result<UpdateStepResult> RunCommandStep(const AcquireContext& context, int64_t round,
                                        size_t step_index, uint64_t round_generation,
                                        uint64_t input_generation,
                                        const std::vector<MemberResult>& results);

// The note of a step's commit up to its counts: what resume looks for.
std::string UpdateStepNotePrefix(const LoopConfig& config, int64_t round, size_t step_index);

// "train: 2 added, 3 removed; pool: 2 moved out" or "no changes".
std::string DescribeChangeCounts(const ChangeCounts& counts);
// The counts DescribeChangeCounts described, read back from its words (other parts of a note,
// "; files: ...", are passed over).
ChangeCounts ParseChangeCounts(const std::string& summary);
// {"train": {"added": 2, "removed": 3, "moved_in": 0, "moved_out": 0, "relabelled": 0}}.
std::string ChangeCountsJson(const ChangeCounts& counts);

}  // namespace cohort::loop
