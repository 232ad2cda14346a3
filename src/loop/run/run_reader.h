// Reading a run directory from outside the controller: `cohort status`, `cohort report`,
// `cohort predict RUN_DIR` and `cohort export` open a run here, take no lock (the journal is
// WAL: readers never block the controller), and find a round's finished members.
//
// Thread-safety: a RunReader is used by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "loop/config/config.h"
#include "loop/run/journal.h"
#include "loop/run/run_dir.h"
#include "store/snapshot.h"

namespace cohort::loop {

struct RunReader {
  RunPaths paths;  // absolute
  LoopConfig config;
  std::unique_ptr<Journal> journal;
  RunRecord run;
  std::optional<int64_t> controller_pid;  // a live controller holding the run's lock

  // "running", "finished", "failed", "stopped", or "interrupted" (the journal says running
  // but no controller holds the lock: it was killed).
  std::string StatusText() const;
};

// Opens RUN_DIR read-only. NotFound "RUN_DIR: not a cohort run directory (no loop.toml and
// run.db)"; the config's and the journal's errors otherwise.
Result<RunReader> OpenRunReader(const std::string& run_dir);

// A member that finished a round: its last `done` attempt.
struct FinishedMember {
  std::string name;
  size_t config_index = 0;
  int attempt = 0;
  std::string device;
  std::string checkpoint;        // absolute; empty when the attempt wrote none (outside member)
  std::string test_predictions;  // absolute; empty when none
};

// The members of `round` whose last attempt is done, in config order. With `round` unset,
// the last round whose status is `done`. Errors (one line each): the run has no such round,
// the round is not done yet (naming its status), no finished round yet.
Result<std::pair<int64_t, std::vector<FinishedMember>>> FinishedMembersOf(
    const RunReader& run, std::optional<int64_t> round);

// FinishedMembersOf, refusing a round with an outside-script member: their weights are their
// script's own, so commands that load the ensemble (`verb`: "cohort predict runs") cannot.
Result<std::pair<int64_t, std::vector<FinishedMember>>> NativeMembersOf(
    const RunReader& run, std::optional<int64_t> round, const std::string& verb);

// The train table of the store generation `round` trained on; its labels say what the
// members learned (RunTaskOf), its schema what they take. `snapshot` keeps `table` alive.
// Errors: the round is not in the journal, the store's.
struct RoundTrainTable {
  std::shared_ptr<const store::Snapshot> snapshot;
  const store::Table* table = nullptr;
};
Result<RoundTrainTable> TrainTableOfRound(const RunReader& run, int64_t round);

// The temperature the loop fitted to `round`'s ensemble on its test table (the journal's
// rounds.test_temperature; loop/ensemble/calibration.h): what `--calibrated` applies in `cohort
// predict` and `cohort export`. Errors (one line): the round is not in the journal; it has none (a
// regression run, a test table of fewer than 2 rows, a round an older cohort finished).
Result<double> RoundTemperature(const RunReader& run, int64_t round);

}  // namespace cohort::loop
