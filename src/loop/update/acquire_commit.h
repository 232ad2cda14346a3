// The acquire-and-commit step of a round that goes on: the strategy scores the pool with the
// ensemble's predictions and picks k samples (journalled with their scores), the oracle labels
// them, and one store transaction moves them from the pool to the train table: the next
// generation. Each phase is journalled before it starts (acquiring, labelling, committing).
//
// A controller killed after the commit but before the round was journalled done is recognised
// on resume: CURRENT is then past the round's input (further when [[update]] command steps
// after the acquire step committed too), and the generation right after the input must move
// exactly the journalled picks (anything else is Corruption, never silently accepted). The picks
// are a function of the members' prediction files and the round's seed, so they come out the same.
//
// Thread-safety: used by the controller thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "loop/config/config.h"
#include "loop/ensemble/predictions.h"
#include "loop/run/journal.h"
#include "loop/run/run_dir.h"
#include "loop/schedule/scheduler.h"
#include "store/env.h"
#include "store/snapshot.h"

namespace cohort::loop {

struct AcquireContext {
  const LoopConfig* config = nullptr;
  const RunPaths* paths = nullptr;
  Journal* journal = nullptr;
  int64_t run_id = 0;
  store::Env* env = nullptr;
  Scheduler* scheduler = nullptr;  // runs a command oracle
  int64_t classes = 0;             // the run's class count: an oracle's labels must fit it
  RunTask task;                    // what the members' prediction files hold
  const store::FileLock* store_lock = nullptr;  // the run's hold on its store's writer lock
};

struct AcquireResult {
  uint64_t output_generation = 0;
  size_t acquired = 0;
  // What the store repaired when the commit began (an interrupted commit's manifest removed),
  // one line each, for the user to see.
  std::vector<std::string> notes;
};

// Acquires min(k, pool) samples of `round` on `snap` (the round's input generation) by the
// members' pool predictions in `results`, labels and commits them; k == 0 commits nothing (the
// next round retrains on the same generation). Adds the acquire, label and commit seconds to
// `timings`.
Result<AcquireResult> AcquireAndCommit(const AcquireContext& context, int64_t round,
                                       const store::Snapshot& snap,
                                       const std::vector<MemberResult>& results, int64_t k,
                                       PhaseTimings* timings);

}  // namespace cohort::loop
