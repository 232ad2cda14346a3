#include "loop/acquire/strategy.h"

namespace cohort::loop {
namespace {

using enum StrategyTask;

constexpr Strategy kStrategies[] = {
    // name, task, needs several members, measure, regression measure, joint pick
    {"random", kClassification, false, nullptr, nullptr, nullptr},
    {"entropy", kClassification, false, PredictiveEntropy, nullptr, nullptr},
    {"margin", kClassification, false, NegativeMargin, nullptr, nullptr},
    {"least_confident", kClassification, false, LeastConfidence, nullptr, nullptr},
    {"variance", kClassification, true, MemberVariance, nullptr, nullptr},
    {"bald", kClassification, true, MutualInformation, nullptr, nullptr},
    {"vote_entropy", kClassification, true, VoteEntropy, nullptr, nullptr},
    {"batchbald", kClassification, true, MutualInformation, nullptr, SelectBatchBald},
    {"random", kRegression, false, nullptr, nullptr, nullptr},
    {"max_deviation", kRegression, true, nullptr, MaxDeviation, nullptr},
    {"mean_deviation", kRegression, true, nullptr, MeanDeviation, nullptr},
    // With one member, the member's own predicted variance: not a disagreement measure.
    {"variance", kRegression, false, nullptr, TotalVariance, nullptr},
};

}  // namespace

const Strategy* FindStrategy(std::string_view name, StrategyTask task) {
  for (const Strategy& s : kStrategies) {
    if (s.task == task && name == s.name) return &s;
  }
  return nullptr;
}

Result<const Strategy*> LookUpStrategy(std::string_view name, StrategyTask task) {
  if (const Strategy* s = FindStrategy(name, task)) return s;
  std::string valid;
  for (const std::string& n : StrategyNames(task)) {
    if (!valid.empty()) valid += ", ";
    valid += n;
  }
  return Status::InvalidArgument(
      std::string(task == kRegression ? "unknown regression " : "unknown ") +
      "acquisition strategy '" + std::string(name) + "' (valid: " + valid + ")");
}

std::vector<std::string> StrategyNames(StrategyTask task) {
  std::vector<std::string> names;
  for (const Strategy& s : kStrategies) {
    if (s.task == task) names.emplace_back(s.name);
  }
  return names;
}

bool StrategyReadsPredictions(std::string_view name) {
  for (const Strategy& s : kStrategies) {
    if (name == s.name) return s.reads_predictions();
  }
  return true;
}

}  // namespace cohort::loop
