#include "loop/resume_plan.h"

#include <gtest/gtest.h>

namespace cohort::loop {
namespace {

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

TEST(ResumePlanTest, SeveralUpdateStepsMayEachHaveCommitted) {
  const auto unfinished = Round(0, 1, std::nullopt, RoundStatus::kCommitting);
  // One step (the default): CURRENT at most one past the round's input.
  EXPECT_FALSE(PlanResume({unfinished}, 3, "S", "J").ok());
  // Two command steps: each may have committed before the controller died.
  auto two = PlanResume({unfinished}, 3, "S", "J", 2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->round, 0);
  EXPECT_EQ(two->generation, 1u);
  EXPECT_FALSE(PlanResume({unfinished}, 4, "S", "J", 2).ok());
  // A finished round's output is exact, whatever the steps.
  EXPECT_FALSE(PlanResume({Round(0, 1, 2, RoundStatus::kDone)}, 3, "S", "J", 2).ok());
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

TEST(ResumePlanTest, AResumedRoundSaysWhoKeepsAndWhoRunsAgain) {
  LoopConfig c;
  c.failure.retries = 2;
  c.members.resize(4);
  for (int i = 0; i < 4; ++i) c.members[i].name = std::string(1, static_cast<char>('a' + i));
  std::vector<AttemptRecord> attempts = {
      Attempt("a", 1, AttemptStatus::kFailed), Attempt("a", 2, AttemptStatus::kRunning),
      Attempt("b", 1, AttemptStatus::kDone),   Attempt("c", 1, AttemptStatus::kFailed),
      Attempt("c", 2, AttemptStatus::kFailed), Attempt("c", 3, AttemptStatus::kFailed),
  };
  auto results = ResultsFromAttempts(c, attempts);
  MemberPlan plan = PlanMembers(c, attempts, false, true, {}, "/run", &results);
  EXPECT_EQ(DescribeResumedRound(c, 2, 3, plan, results),
            "round 2 resumes on generation 3: b keeps its finished attempt; a (attempt 3, 2 tries "
            "left after 1 failure), d (attempt 1, 3 tries left) run again; c stays failed (out "
            "of attempts)");
}

TEST(ResumePlanTest, LongestMembersStartFirst) {
  LoopConfig c;
  c.members.resize(4);
  std::vector<MemberTask> tasks;
  for (size_t i = 0; i < 4; ++i) {
    c.members[i].name = std::string("m") + std::to_string(i);
    MemberTask t;
    t.index = i;
    t.member = &c.members[i];
    tasks.push_back(t);
  }
  auto done = [](const std::string& member, double seconds) {
    AttemptRecord a;
    a.member = member;
    a.status = AttemptStatus::kDone;
    a.metrics_json = "{\"attempt_seconds\": " + std::to_string(seconds) + "}";
    return a;
  };
  AttemptRecord failed = done("m0", 99);
  failed.status = AttemptStatus::kFailed;  // only finished attempts say how long a member takes
  OrderLongestFirst({done("m1", 5), done("m2", 30), done("m3", 5), failed}, &tasks);
  std::vector<std::string> order;
  for (const MemberTask& t : tasks) order.push_back(t.member->name);
  // m2 longest; m1 and m3 tie and keep their config order; m0 is unknown and goes last.
  EXPECT_EQ(order, (std::vector<std::string>{"m2", "m1", "m3", "m0"}));
}

}  // namespace
}  // namespace cohort::loop
