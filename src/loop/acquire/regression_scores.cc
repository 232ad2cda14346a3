#include "loop/acquire/regression_scores.h"

#include "loop/acquire/strategy.h"
#include "loop/ensemble/sample_measures.h"

namespace cohort::loop {

Result<std::vector<double>> ScoreRegression(const std::string& strategy,
                                            const RegressionPredictions& predictions) {
  COHORT_ASSIGN_OR_RETURN(const Strategy* s, LookUpStrategy(strategy, StrategyTask::kRegression));
  if (s->regression_measure != nullptr) {
    return MeasureRegressionSamples(s->regression_measure, predictions);
  }
  COHORT_RETURN_IF_ERROR(ValidateRegressionPredictions(predictions));
  return std::vector<double>(static_cast<size_t>(predictions.samples), 0.0);
}

}  // namespace cohort::loop
