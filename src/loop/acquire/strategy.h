// The acquisition strategies, one record each: the one list the config checks a `strategy` name
// against (and names in its errors), docs/acquisition.md describes, and the acquire step looks
// up. What a strategy does follows from which of its functions is set:
//   measure             pointwise classification: one score per sample from the members' rows
//                       of it (loop/ensemble/sample_measures.h); the pool is read a block at a
//                       time (stream_scores.h) and the batch drawn by SelectBatch;
//   regression_measure  pointwise regression: the same over the members' means and variances;
//   joint               the whole batch at once from the stacked pool (BatchBALD), each pick
//                       journalled with its gain; its measure, if set, is its per-sample score
//                       (BatchBALD's candidates are the top BALD samples);
//   none                `random`: every sample scores 0, the seeded tie-break draws the batch,
//                       and the members need not predict the pool at all.
// Adding a pointwise strategy is its measure (sample_measures.h) and one row of kStrategies in
// strategy.cc.
//
// Thread-safety: the table is constant; every function is safe to call concurrently.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "loop/acquire/batch_bald.h"
#include "loop/ensemble/sample_measures.h"

namespace cohort::loop {

enum class StrategyTask { kClassification, kRegression };

using JointPick = Result<BatchBaldPicks> (*)(const EnsemblePredictions& predictions, int64_t k,
                                             uint64_t seed, const ScoreBand& band,
                                             const BatchBaldOptions& options);

struct Strategy {
  const char* name;
  StrategyTask task;
  // Its scores are identically zero with a single member: it measures disagreement between
  // members (the config refuses it for a one-member run).
  bool needs_several_members;
  SampleMeasure measure;
  RegressionMeasure regression_measure;
  JointPick joint;

  // Whether the members must predict the pool for a round acquiring by it.
  constexpr bool reads_predictions() const {
    return measure != nullptr || regression_measure != nullptr || joint != nullptr;
  }
};

// The record of `name` for `task`, or null.
const Strategy* FindStrategy(std::string_view name, StrategyTask task);

// The record, or InvalidArgument naming the strategy and listing the valid names for `task`.
Result<const Strategy*> LookUpStrategy(std::string_view name, StrategyTask task);

// The names `task` takes, in table order.
std::vector<std::string> StrategyNames(StrategyTask task);

// Whether `name` reads the members' pool predictions, in whichever task knows it (`random`, in
// both, does not); unknown names read them (the config refuses those before a run starts).
bool StrategyReadsPredictions(std::string_view name);

}  // namespace cohort::loop
