// The change-set protocol every update step but acquire follows (docs/updates.md): the step
// writes a change set into RUN_DIR/updates/round-RRRR/step-K/changes (a user's program, or
// cohort itself for a built-in kind), which is read against the step's input generation
// (ReadChangeSet, with the run's class count), applied and committed as one generation noted
// "cohort run NAME round R: update step K (KIND NAME): COUNTS". A bad change set fails the step
// with one line naming it and the file at fault; nothing is committed. An empty change set
// commits nothing.
//
// Resume: a step's commit is recognised by its note in the store's history (past the round's
// input generation), so a controller killed after the commit does not run the step again; nor
// when a later step of the round has committed (this one then ended with no changes); killed
// before it, the change-set directory is cleared and the step runs again.
//
// Thread-safety: used by the controller thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "loop/ensemble/predictions.h"
#include "loop/update/update_step.h"
#include "store/manifest.h"

namespace cohort::loop {

// A step under way: its words and files.
struct ChangeSetStep {
  std::string what;                      // "update step 2 (pseudo_label)", for messages
  std::string note_prefix;               // UpdateStepNotePrefix
  std::string dir;                       // RUN_DIR/updates/round-RRRR/step-K, absolute
  std::string changes_dir;               // dir/changes, empty and ready to write
  std::string predictions_path;          // dir/predictions.json (COHORT_PREDICTIONS)
  std::vector<store::Manifest> history;  // the store's, when the step began
  std::shared_ptr<const store::Snapshot> input_snap;  // the generation the step changes
};

struct BegunStep {
  std::optional<UpdateStepResult> ended;  // set: the step ended before a restart, do not run it
  ChangeSetStep step;                     // otherwise: a fresh start
};

// Checks whether the step ended before a restart; if not, that CURRENT is its input
// generation, clears and creates its change-set directory and writes predictions.json (the
// members' prediction files). Journals the round's phase as committing.
Result<BegunStep> BeginChangeSetStep(const UpdateStepInput& input);

// Reads the change set the step wrote, applies it and commits one generation noted with its
// counts and `note_extra` ("; files: a.csv (100)").
Result<UpdateStepResult> CommitChangeSet(const UpdateStepInput& input, const ChangeSetStep& step,
                                         const std::string& note_extra = "");

// The note of a step's commit up to its counts: what resume looks for.
std::string UpdateStepNotePrefix(const LoopConfig& config, int64_t round, size_t step_index);
// "command fix.py", or "pseudo_label" for a built-in step under its default name.
std::string DescribeStep(const UpdateStepConfig& step);

// "train: 2 added, 3 removed; pool: 2 moved out" or "no changes".
std::string DescribeChangeCounts(const ChangeCounts& counts);
// The counts DescribeChangeCounts described, read back from its words (other parts of a note,
// "; files: ...", are passed over).
ChangeCounts ParseChangeCounts(const std::string& summary);
// {"train": {"added": 2, "removed": 3, "moved_in": 0, "moved_out": 0, "relabelled": 0}}.
std::string ChangeCountsJson(const ChangeCounts& counts);

// What the built-in kinds write their change sets with.
Status WriteText(const std::string& path, const std::string& text);  // atomically
Status WriteIds(const std::string& path, const std::vector<uint64_t>& ids);
Status WriteClassLabels(const std::string& path, const std::vector<int64_t>& labels);
// The finished members' class probabilities of `table` (the pool or the train table, whose
// files are `file_of` each result), `rows` rows each, stacked for the ensemble's view.
Result<StackedPredictions> StackMemberFiles(const AcquireContext& c,
                                            const std::vector<MemberResult>& results,
                                            const std::string& table,
                                            std::string MemberResult::*file_of, uint64_t rows);
// Which rows of `table` in `round_snap` are still in that table in `input_snap` (an earlier
// step of the round may have taken some out).
Result<std::vector<bool>> StillThere(const store::Snapshot& round_snap,
                                     const store::Snapshot& input_snap, const std::string& name);

}  // namespace cohort::loop
