// The controller: `cohort run CONFIG`, the closed loop.
//
// Round r on store generation g: every member trains on g and predicts the pool and test
// tables (Scheduler), the ensemble's test metrics are computed and journalled, the stop rules
// are checked, and unless the run stops here the acquisition strategy picks k pool samples,
// the oracle labels them, and one store commit moves them to the train table: generation
// g+1, round r+1. docs/design.md ("The loop") and docs/journal.md describe it for users.
//
// Resume: RunLoop on an existing run continues it from the journal and the store's CURRENT
// (the truth about which generation exists): committed rounds are not redone; in the
// interrupted round, members with a finished attempt keep it and the others start a new
// attempt; a round killed after its commit but before its journal record is recognised (the
// store's newest generation moved exactly the journalled picks) and finished. Everything
// after training is a function of the members' prediction files, the seeds and the store,
// so a resumed run ends with the same generations and metrics as one never interrupted
// (given deterministic training: fixed seeds and one thread per CPU device).
//
// A run that finished may be continued by rerunning it with looser stop rules (more rounds,
// a bigger budget): its last round then acquires and the loop goes on.
//
// Thread-safety: one RunLoop per process (the launcher owns the process's signal handling).
#pragma once

#include <cstdio>
#include <string>

#include "common/status.h"
#include "launch/process_host.h"
#include "loop/display.h"

namespace cohort::loop {

struct RunOptions {
  std::string config_path;
  std::string member_binary;  // `cohort-member`, whose `worker` command the workers run
  FILE* out = stdout;
  DisplayOptions display;
  // Where workers and scripts run; null: this machine (a launch::LocalProcessHost the loop
  // creates).
  launch::ProcessHost* host = nullptr;
  // A new run checks every file of its source generation (store::VerifyGeneration) before it
  // clones it, so it never trains on damaged data; off for huge stores checked otherwise.
  bool verify_source = true;
};

enum class RunOutcome {
  kFinished,  // a stop rule ended the run
  kStopped,   // interrupted (Ctrl-C, SIGTERM): resumable
};

// Runs or resumes the run the config names. Errors: the config (one line naming file, line and
// field), the store, a round that failed (fewer than min_members members finished: the
// message names each failed member and why; rerunning retries that round).
Result<RunOutcome> RunLoop(const RunOptions& options);

}  // namespace cohort::loop
