// Oracles: who gives the labels of the samples a round acquired.
//
// `hidden_labels` reveals the labels the pool table already stores (simulation and
// benchmarks): the move from pool to train carries them, so no label array is made.
//
// `command` runs an outside program, argv as configured (no shell), in the config file's
// directory, with stdout and stderr appended to RUN_DIR/oracle/round-RRRR/oracle.log. Its
// contract (docs/config.md, "The command oracle"):
//   COHORT_ORACLE_IDS       ids.npy: int64 (k,), the store's sample ids, best first
//   COHORT_ORACLE_FEATURES  features.npy: the samples' features in the same order, the
//                           pool table's dtype and shape (k, *feature_shape)
//   COHORT_ORACLE_LABELS    where to write the answer (answer.npy): (k,) integer class
//                           labels; cohort checks it after exit 0 and keeps it as labels.npy
//   COHORT_ROUND, COHORT_STORE, COHORT_GENERATION, COHORT_RUN_DIR for information.
// Exit status 0 with a readable labels.npy of the right length is success; anything else
// fails the round with a message naming the program and what was wrong. The files stay in
// the run directory, so the labels given are auditable. A resumed round whose labels.npy
// exists from an earlier start, for the same ids, reuses it instead of asking again; a
// half-written or unchecked answer is never reused.
//
// Thread-safety: used by the controller thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "loop/config/config.h"
#include "loop/run/run_dir.h"
#include "loop/schedule/scheduler.h"
#include "store/host_array.h"
#include "store/snapshot.h"

namespace cohort::loop {

// The labels of `ids` (rows `rows` of the pool table at the round's generation), or nullopt
// when the move should carry the pool's stored labels (hidden_labels). `train` is the table
// the labels are for (their kind and shape); class labels must lie in [0, classes) (a wrong
// answer fails the round naming the sample ids, and is not kept for reuse). The oracle's files
// go to `dir` (relative to the run directory), by default RunPaths::OracleDir(round); an
// update step that asks about train samples (relabel_or_drop) passes its own, and its train
// table as `pool`.
Result<std::optional<store::HostArray>> LabelSamples(
    const LoopConfig& config, const RunPaths& paths, int64_t round, uint64_t generation,
    const store::Table& pool, const store::Table& train, const std::vector<uint64_t>& ids,
    const std::vector<uint64_t>& rows, int64_t classes, Scheduler* scheduler,
    const std::string& dir = "");

}  // namespace cohort::loop
