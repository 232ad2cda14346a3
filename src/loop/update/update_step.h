// Update steps: what changes the dataset between rounds, run in config order after the round's
// members are scored (docs/updates.md). Every round that goes on runs its steps through
// RunUpdateStep; a run without [[update]] tables has one, the default acquire (ParseLoopConfig
// gives it), so there is one round path. Each kind is one file holding its run function, and
// one row of the kind table in update_step.cc:
//   acquire          acquire_step.cc          the strategy's picks labelled and committed
//                                             (acquire_commit.h); always the first step
//   command          command_step.cc          a user's program writes a change set
//   pseudo_label     pseudo_label_step.cc     confident pool samples join train (pseudo_label.h)
//   relabel_or_drop  relabel_or_drop_step.cc  suspect train labels dropped or asked again
//   import_new       import_new_step.cc       new files in a directory join a table
// Every kind but acquire follows change_set_step.h: a change set written into the step's
// directory, checked, applied and committed as one generation whose note resume recognises.
//
// Thread-safety: used by the controller thread only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "loop/config/config.h"
#include "loop/run/journal.h"
#include "loop/schedule/scheduler.h"
#include "loop/update/acquire_commit.h"
#include "loop/update/change_set.h"
#include "store/snapshot.h"

namespace cohort::loop {

struct UpdateStepInput {
  const AcquireContext* context = nullptr;
  int64_t round = 0;
  size_t step_index = 0;                        // from 0, into config.updates
  const store::Snapshot* round_snap = nullptr;  // the generation the round's members trained on
  uint64_t input_generation = 0;                // what the step changes: the steps before it
  const std::vector<MemberResult>* results = nullptr;  // the members' prediction files
  int64_t k = 0;                                       // what an acquire step picks
  PhaseTimings* timings = nullptr;  // the round's; a step adds the seconds it took

  const UpdateStepConfig& step() const { return context->config->updates[step_index]; }
};

struct UpdateStepResult {
  uint64_t output_generation = 0;  // the input generation when nothing was committed
  bool committed = false;
  // The step had ended before a restart (its commit found, or a later step's): it did not run.
  bool resumed = false;
  std::string summary;             // "train: 2 added, 3 removed", "acquired 5 by bald"
  ChangeCounts counts;             // what the commit changed (read back from its note when resumed)
  std::vector<std::string> notes;  // what the store repaired when the commit began
  double seconds = 0;              // wall time of the step
};

// Runs step `input.step_index` of `input.round` by its kind's row.
Result<UpdateStepResult> RunUpdateStep(const UpdateStepInput& input);

}  // namespace cohort::loop
