#include "loop/stop_rules.h"

#include <gtest/gtest.h>

#include "loop/ensemble/metrics.h"

namespace cohort::loop {
namespace {

LoopConfig Config(std::optional<int64_t> rounds, std::optional<int64_t> budget,
                  std::optional<TargetMetric> target, bool stop_when_empty = true) {
  LoopConfig c;
  c.acquisition.batch_size = 10;
  c.stop.max_rounds = rounds;
  c.stop.label_budget = budget;
  c.stop.target = target;
  c.stop.stop_when_pool_exhausted = stop_when_empty;
  return c;
}

std::map<std::string, double> Accuracy(double a) {
  ClassificationMetrics m;
  m.accuracy = a;
  m.nll = 1 - a;
  return m.ToMap();
}

TEST(StopRulesTest, RulesAreCheckedInOrder) {
  TargetMetric target{"accuracy", 0.9, true};
  LoopConfig c = Config(3, 25, target);
  // All rules met: the target is named.
  auto d = DecideAfterRound(c, {.round = 2, .labels_used = 30, .pool_size = 0}, Accuracy(0.95));
  EXPECT_EQ(d.reason, "the ensemble's test accuracy reached 0.9");
  EXPECT_EQ(d.k, 0);
  d = DecideAfterRound(c, {.round = 2, .labels_used = 30, .pool_size = 0}, Accuracy(0.5));
  EXPECT_EQ(d.reason, "3 rounds done (stop.max_rounds)");
  d = DecideAfterRound(c, {.round = 1, .labels_used = 30, .pool_size = 0}, Accuracy(0.5));
  EXPECT_EQ(d.reason, "the label budget of 25 is spent");
  d = DecideAfterRound(c, {.round = 1, .labels_used = 0, .pool_size = 0}, Accuracy(0.5));
  EXPECT_EQ(d.reason, "the pool is exhausted");
}

TEST(StopRulesTest, KIsTheSmallestOfBatchBudgetLeftAndPool) {
  LoopConfig c = Config(10, 25, std::nullopt);
  auto d = DecideAfterRound(c, {.round = 0, .labels_used = 0, .pool_size = 100}, Accuracy(0.5));
  EXPECT_FALSE(d.stops());
  EXPECT_EQ(d.k, 10);
  d = DecideAfterRound(c, {.round = 0, .labels_used = 20, .pool_size = 100}, Accuracy(0.5));
  EXPECT_EQ(d.k, 5);
  d = DecideAfterRound(c, {.round = 0, .labels_used = 0, .pool_size = 3}, Accuracy(0.5));
  EXPECT_EQ(d.k, 3);
}

TEST(StopRulesTest, RoundsLeftAreTheFewestAnyRuleAllows) {
  // 10 rounds, a budget of 25 labels at 10 a round, a pool of 100.
  LoopConfig c = Config(10, 25, std::nullopt);
  EXPECT_EQ(RoundsLeftAfter(c, {.round = 0, .labels_used = 0, .pool_size = 100}), 3);
  EXPECT_EQ(RoundsLeftAfter(c, {.round = 0, .labels_used = 20, .pool_size = 100}), 1);
  EXPECT_EQ(RoundsLeftAfter(c, {.round = 8, .labels_used = 0, .pool_size = 100}), 1);
  EXPECT_EQ(RoundsLeftAfter(c, {.round = 0, .labels_used = 0, .pool_size = 15}), 2);
  EXPECT_EQ(RoundsLeftAfter(c, {.round = 9, .labels_used = 0, .pool_size = 100}), 0);
  // Only a target bounds it: unknown.
  LoopConfig open = Config(std::nullopt, std::nullopt, TargetMetric{"accuracy", 0.9, true}, false);
  EXPECT_EQ(RoundsLeftAfter(open, {.round = 3, .labels_used = 0, .pool_size = 100}), std::nullopt);
}

TEST(StopRulesTest, NothingLeftToAcquireEndsARunWithoutMaxRounds) {
  // Only a target, an empty pool that does not stop the run: it would retrain forever.
  TargetMetric target{"nll", 0.01, false};
  LoopConfig c = Config(std::nullopt, std::nullopt, target, false);
  auto d = DecideAfterRound(c, {.round = 4, .labels_used = 50, .pool_size = 0}, Accuracy(0.5));
  EXPECT_EQ(d.reason, "nothing is left to acquire, and the ensemble's test nll did not reach 0.01");
  // A budget alone: it stops when spent, and when nothing is left before that.
  c = Config(std::nullopt, 100, std::nullopt, false);
  d = DecideAfterRound(c, {.round = 4, .labels_used = 50, .pool_size = 0}, Accuracy(0.5));
  EXPECT_EQ(d.reason, "nothing is left to acquire");
  // With max_rounds the run is bounded: it retrains on the same data until then.
  c = Config(6, std::nullopt, target, false);
  d = DecideAfterRound(c, {.round = 4, .labels_used = 50, .pool_size = 0}, Accuracy(0.5));
  EXPECT_FALSE(d.stops());
  EXPECT_EQ(d.k, 0);
}

TEST(StopRulesTest, ATargetOnAMetricTheLoopDoesNotComputeIsNeverReached) {
  EXPECT_FALSE(TargetReached({"rmse", 1e9, false}, Accuracy(1.0)));
  EXPECT_TRUE(TargetReached({"ece", 0.1, false}, Accuracy(1.0)));
  EXPECT_FALSE(TargetReached({"count", 0, false}, Accuracy(1.0)));
}

// A regression run's targets: lower is better, reached at or below the value.
TEST(StopRulesTest, RegressionTargetsAreReachedFromAbove) {
  const std::map<std::string, double> round{
      {"count", 50}, {"rmse", 0.2}, {"mae", 0.15}, {"nll", -0.4}, {"calibration_error", 0.05}};
  EXPECT_TRUE(TargetReached({"rmse", 0.2, false}, round));
  EXPECT_FALSE(TargetReached({"rmse", 0.19, false}, round));
  EXPECT_TRUE(TargetReached({"mae", 0.3, false}, round));
  EXPECT_FALSE(TargetReached({"accuracy", 0.0, true}, round));
  LoopConfig c = Config(10, std::nullopt, TargetMetric{"rmse", 0.25, false});
  auto d = DecideAfterRound(c, {.round = 1, .labels_used = 10, .pool_size = 100}, round);
  EXPECT_EQ(d.reason, "the ensemble's test rmse reached 0.25");
  EXPECT_EQ(d.k, 0);
}

TEST(StopRulesTest, KnownLastRound) {
  LoopConfig c = Config(3, 50, std::nullopt);
  EXPECT_TRUE(KnownLastRound(c, {.round = 2, .labels_used = 0, .pool_size = 10}));
  EXPECT_TRUE(KnownLastRound(c, {.round = 0, .labels_used = 50, .pool_size = 10}));
  EXPECT_TRUE(KnownLastRound(c, {.round = 0, .labels_used = 0, .pool_size = 0}));
  EXPECT_FALSE(KnownLastRound(c, {.round = 1, .labels_used = 10, .pool_size = 10}));
}

}  // namespace
}  // namespace cohort::loop
