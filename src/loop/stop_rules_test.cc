#include "loop/stop_rules.h"

#include <gtest/gtest.h>

#include "loop/resume_plan.h"

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

ClassificationMetrics Accuracy(double a) {
  ClassificationMetrics m;
  m.accuracy = a;
  m.nll = 1 - a;
  return m;
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
}

TEST(StopRulesTest, KnownLastRound) {
  LoopConfig c = Config(3, 50, std::nullopt);
  EXPECT_TRUE(KnownLastRound(c, {.round = 2, .labels_used = 0, .pool_size = 10}));
  EXPECT_TRUE(KnownLastRound(c, {.round = 0, .labels_used = 50, .pool_size = 10}));
  EXPECT_TRUE(KnownLastRound(c, {.round = 0, .labels_used = 0, .pool_size = 0}));
  EXPECT_FALSE(KnownLastRound(c, {.round = 1, .labels_used = 10, .pool_size = 10}));
}

RoundRecord Round(int64_t r, uint64_t in, std::optional<uint64_t> out, RoundStatus status) {
  RoundRecord rec;
  rec.round = r;
  rec.input_generation = in;
  rec.output_generation = out;
  rec.status = status;
  return rec;
}

TEST(ResumePlanTest, WhereARunGoesOn) {
  auto fresh = PlanResume({}, 1, "S", "J");
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(fresh->round, 0);
  EXPECT_EQ(fresh->generation, 1u);
  // After a committed round: the next on its output.
  auto next = PlanResume({Round(0, 1, 2, RoundStatus::kDone)}, 2, "S", "J");
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->round, 1);
  EXPECT_EQ(next->generation, 2u);
  // An unfinished round again, its commit possibly done already.
  auto again = PlanResume({Round(0, 1, std::nullopt, RoundStatus::kCommitting)}, 2, "S", "J");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->round, 0);
  EXPECT_EQ(again->generation, 1u);
  // The round that finished the run is looked at again.
  auto last = PlanResume({Round(4, 5, 5, RoundStatus::kDone)}, 5, "S", "J");
  ASSERT_TRUE(last.ok());
  EXPECT_TRUE(last->reconsider);
  EXPECT_EQ(last->round, 4);
  // A store moved on by someone else.
  auto moved = PlanResume({Round(4, 5, 5, RoundStatus::kDone)}, 6, "S", "J");
  ASSERT_FALSE(moved.ok());
  EXPECT_NE(moved.status().message().find("S: CURRENT is generation 6, but the journal J expects "
                                          "generation 5"),
            std::string::npos);
}

AttemptRecord Attempt(const std::string& member, int n, AttemptStatus status) {
  AttemptRecord a;
  a.member = member;
  a.attempt = n;
  a.status = status;
  a.exit = "exit of " + member + std::to_string(n);
  return a;
}

TEST(ResumePlanTest, OnlyTheMembersFailuresCountAgainstItsRetries) {
  LoopConfig c;
  c.failure.retries = 2;
  c.members.resize(3);
  c.members[0].name = "a";
  c.members[1].name = "b";
  c.members[2].name = "c";
  std::vector<AttemptRecord> attempts = {
      Attempt("a", 1, AttemptStatus::kFailed),  Attempt("a", 2, AttemptStatus::kInterrupted),
      Attempt("a", 3, AttemptStatus::kRunning), Attempt("b", 1, AttemptStatus::kDone),
      Attempt("c", 1, AttemptStatus::kKilled),  Attempt("c", 2, AttemptStatus::kFailed),
      Attempt("c", 3, AttemptStatus::kFailed),
  };
  auto results = ResultsFromAttempts(c, attempts);
  EXPECT_TRUE(results[1].done);
  MemberPlan plan = PlanMembers(c, attempts, false, true, {}, "/run", &results);
  ASSERT_EQ(plan.tasks.size(), 1u);
  EXPECT_EQ(plan.tasks[0].member->name, "a");
  EXPECT_EQ(plan.tasks[0].next_attempt, 4);
  EXPECT_EQ(plan.tasks[0].attempts_left, 2);  // one failure of three tries
  EXPECT_EQ(plan.failures[0], 1);
  EXPECT_TRUE(plan.out_of_attempts[2]);
  EXPECT_EQ(results[2].error, "exit of c3");
  // Rerunning a failed round gives c one more try.
  auto rerun = PlanMembers(c, attempts, true, true, {}, "/run", &results);
  ASSERT_EQ(rerun.tasks.size(), 2u);
  EXPECT_EQ(rerun.tasks[1].member->name, "c");
  EXPECT_EQ(rerun.tasks[1].attempts_left, 1);
}

}  // namespace
}  // namespace cohort::loop
