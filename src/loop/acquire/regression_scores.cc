#include "loop/acquire/regression_scores.h"

#include <algorithm>
#include <cmath>

namespace cohort::loop {
namespace {

enum class RegressionStrategy { kRandom, kMaxDeviation, kMeanDeviation, kVariance };

struct NamedRegressionStrategy {
  const char* name;
  RegressionStrategy strategy;
  bool needs_several_members;
};

constexpr NamedRegressionStrategy kRegressionStrategies[] = {
    {"random", RegressionStrategy::kRandom, false},
    {"max_deviation", RegressionStrategy::kMaxDeviation, true},
    {"mean_deviation", RegressionStrategy::kMeanDeviation, true},
    {"variance", RegressionStrategy::kVariance, false},
};

const NamedRegressionStrategy* FindRegressionStrategy(const std::string& name) {
  for (const NamedRegressionStrategy& s : kRegressionStrategies) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

Result<RegressionStrategy> ParseRegressionStrategy(const std::string& name) {
  if (const NamedRegressionStrategy* s = FindRegressionStrategy(name)) return s->strategy;
  std::string valid;
  for (const NamedRegressionStrategy& s : kRegressionStrategies) {
    if (!valid.empty()) valid += ", ";
    valid += s.name;
  }
  return Status::InvalidArgument("unknown regression acquisition strategy '" + name +
                                 "' (valid: " + valid + ")");
}

}  // namespace

const std::vector<std::string>& RegressionStrategies() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const NamedRegressionStrategy& s : kRegressionStrategies) v.emplace_back(s.name);
    return v;
  }();
  return names;
}

bool RegressionStrategyNeedsSeveralMembers(const std::string& strategy) {
  const NamedRegressionStrategy* s = FindRegressionStrategy(strategy);
  return s != nullptr && s->needs_several_members;
}

Result<std::vector<double>> ScoreRegression(const std::string& strategy,
                                            const RegressionPredictions& predictions) {
  COHORT_ASSIGN_OR_RETURN(RegressionStrategy which, ParseRegressionStrategy(strategy));
  COHORT_RETURN_IF_ERROR(ValidateRegressionPredictions(predictions));
  const RegressionPredictions& p = predictions;
  const int64_t M = p.members;
  const int64_t D = p.outputs;
  const double inv_m = 1.0 / static_cast<double>(M);
  std::vector<double> scores(static_cast<size_t>(p.samples), 0.0);
  if (which == RegressionStrategy::kRandom) return scores;

  for (int64_t i = 0; i < p.samples; i++) {
    double max_sd = 0;
    double sum_sd = 0;
    double sum_total_variance = 0;
    for (int64_t d = 0; d < D; d++) {
      // Mean over members in member order, then the population variance about it (two passes:
      // no cancellation when the means are large and close together).
      double mean = 0;
      double mean_variance = 0;
      for (int64_t m = 0; m < M; m++) {
        mean += p.mean(m, i)[d];
        mean_variance += p.variance(m, i)[d];
      }
      mean *= inv_m;
      mean_variance *= inv_m;
      double spread = 0;
      for (int64_t m = 0; m < M; m++) {
        const double dev = p.mean(m, i)[d] - mean;
        spread += dev * dev;
      }
      spread *= inv_m;
      const double sd = std::sqrt(spread);
      max_sd = std::max(max_sd, sd);
      sum_sd += sd;
      sum_total_variance += mean_variance + spread;
    }
    switch (which) {
      case RegressionStrategy::kRandom:
        break;
      case RegressionStrategy::kMaxDeviation:
        scores[i] = max_sd;
        break;
      case RegressionStrategy::kMeanDeviation:
        scores[i] = sum_sd / static_cast<double>(D);
        break;
      case RegressionStrategy::kVariance:
        scores[i] = sum_total_variance / static_cast<double>(D);
        break;
    }
  }
  return scores;
}

}  // namespace cohort::loop
