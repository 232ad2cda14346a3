#include "loop/acquire/acquisition.h"

#include <utility>

#include "loop/acquire/batch_bald.h"

namespace cohort::loop {

Result<std::vector<double>> ScoreSamples(const std::string& strategy,
                                         const EnsemblePredictions& predictions) {
  COHORT_ASSIGN_OR_RETURN(const Strategy* s,
                          LookUpStrategy(strategy, StrategyTask::kClassification));
  if (s->measure != nullptr) return MeasureSamples(s->measure, predictions);
  COHORT_RETURN_IF_ERROR(ValidatePredictions(predictions));
  return std::vector<double>(static_cast<size_t>(predictions.samples), 0.0);
}

Result<std::vector<int64_t>> Acquire(const std::string& strategy,
                                     const EnsemblePredictions& predictions, int64_t k,
                                     uint64_t seed, std::vector<double>* scores_out) {
  COHORT_ASSIGN_OR_RETURN(const Strategy* s,
                          LookUpStrategy(strategy, StrategyTask::kClassification));
  if (k < 0) return Status::InvalidArgument("cannot acquire " + std::to_string(k) + " samples");
  if (k > predictions.samples) {
    return Status::InvalidArgument("cannot acquire " + std::to_string(k) +
                                   " samples from a pool of " +
                                   std::to_string(predictions.samples));
  }
  COHORT_ASSIGN_OR_RETURN(std::vector<double> scores, ScoreSamples(strategy, predictions));
  std::vector<int64_t> order;
  if (s->joint != nullptr) {
    COHORT_ASSIGN_OR_RETURN(BatchBaldPicks picks,
                            s->joint(predictions, k, seed, {}, BatchBaldOptions{}));
    order = std::move(picks.indices);
  } else {
    COHORT_ASSIGN_OR_RETURN(order, SelectTop(scores, k, seed));
  }
  if (scores_out != nullptr) *scores_out = std::move(scores);
  return order;
}

}  // namespace cohort::loop
