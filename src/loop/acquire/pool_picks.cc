#include "loop/acquire/pool_picks.h"

#include <utility>

#include "loop/acquire/stream_scores.h"

namespace cohort::loop {
namespace {

Result<std::vector<double>> PoolScores(const Strategy& strategy, const PoolPickRequest& r) {
  if (strategy.measure != nullptr) {
    return StreamScores(strategy.measure, r.samples, r.rows, r.classes);
  }
  if (strategy.regression_measure != nullptr) {
    COHORT_ASSIGN_OR_RETURN(StackedPredictions stacked,
                            StackPredictions(r.predictions, r.rows, r.task));
    COHORT_ASSIGN_OR_RETURN(auto view, MakeRegressionPredictions(stacked.data, stacked.members,
                                                                 stacked.samples, stacked.outputs));
    return MeasureRegressionSamples(strategy.regression_measure, view);
  }
  // `random`: every row ties and the seeded tie-break draws the batch.
  return std::vector<double>(r.rows, 0.0);
}

}  // namespace

Result<PoolPicks> PickFromPool(const Strategy& strategy, const PoolPickRequest& r) {
  PoolPicks picks;
  if (strategy.joint != nullptr) {
    COHORT_ASSIGN_OR_RETURN(StackedPredictions stacked,
                            StackPoolSamples(r.samples, r.rows, r.classes));
    COHORT_ASSIGN_OR_RETURN(auto view, MakeEnsemblePredictions(stacked.data, stacked.members,
                                                               stacked.samples, stacked.classes));
    COHORT_ASSIGN_OR_RETURN(BatchBaldPicks joint,
                            strategy.joint(view, r.k, r.seed, r.band, r.batch_bald));
    picks.scores.assign(r.rows, 0.0);
    for (size_t j = 0; j < joint.indices.size(); ++j) {
      picks.scores[static_cast<size_t>(joint.indices[j])] = joint.gains[j];
    }
    picks.indices = std::move(joint.indices);
    return picks;
  }
  COHORT_ASSIGN_OR_RETURN(picks.scores, PoolScores(strategy, r));
  COHORT_ASSIGN_OR_RETURN(picks.indices,
                          SelectBatch(picks.scores, r.k, r.seed, r.band, r.selection));
  return picks;
}

}  // namespace cohort::loop
