// The controller (RunLoop) on a launch::FakeProcessHost: stop rules, min_members, interrupts,
// resume and retry counts across it, with a real store and journal but no process and no torch.
#include "loop/controller.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "common/file_util.h"
#include "launch/testing/fake_process_host.h"
#include "loop/acquire/round_seeds.h"
#include "loop/acquire/selection.h"
#include "loop/config/testing/source_store.h"
#include "loop/run/journal.h"
#include "loop/run/run_dir.h"
#include "loop/schedule/testing/fake_worker.h"
#include "loop/update/acquire_commit.h"
#include "store/import.h"
#include "store/npy.h"
#include "store/store.h"

namespace cohort::loop {
namespace {

namespace fs = std::filesystem;
using Outcome = FakeAttempt::Outcome;
using std::chrono::milliseconds;

std::string EnvOf(const launch::SpawnSpec& spec, const std::string& name) {
  for (const auto& [k, v] : spec.env) {
    if (k == name) return v;
  }
  return "";
}

// The command oracle `oracle`: answers every id with `*label`, or exits 3 when it is < -100.
class FakeOracle : public launch::FakeProcessHost::Program {
 public:
  explicit FakeOracle(const int64_t* label) : label_(label) {}
  void OnStart(launch::FakeProcessHost::Process& p) override {
    if (*label_ < -100) return p.Exit(3);
    auto ids = store::ReadNpyFile(EnvOf(p.spec(), "COHORT_ORACLE_IDS"));
    if (!ids.ok()) return p.Exit(4);
    store::HostArray labels(store::Dtype::kInt64, {ids->shape[0]});
    for (uint64_t i = 0; i < ids->shape[0]; ++i) labels.as<int64_t>()[i] = *label_;
    p.Exit(store::WriteNpyFile(EnvOf(p.spec(), "COHORT_ORACLE_LABELS"), labels).ok() ? 0 : 5);
  }

 private:
  const int64_t* label_;
};

class ControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = store::testing::ScratchDir();
    testing::MakeSourceStore(dir_ + "/source", 6, 7, 6);
    out_ = std::tmpfile();
  }
  void TearDown() override { std::fclose(out_); }

  void WriteConfig(int members, const std::string& extra, int devices = 2) {
    std::ofstream(dir_ + "/loop.toml")
        << testing::LoopConfigText(dir_ + "/source", members, devices, extra);
  }

  // One `cohort run` on a fresh fake host; `interrupts` at these virtual times.
  Result<RunOutcome> Run(std::vector<milliseconds> interrupts = {}) {
    launch::FakeProcessHost host(FakeWorkerFactory(
        worker_,
        [this](const launch::SpawnSpec& spec) -> std::unique_ptr<launch::FakeProcessHost::Program> {
          if (spec.argv.at(0) != "oracle") return nullptr;
          return std::make_unique<FakeOracle>(&oracle_label_);
        }));
    for (milliseconds at : interrupts) host.InterruptAt(at);
    RunOptions options;
    options.config_path = dir_ + "/loop.toml";
    options.member_binary = "cohort-member";
    options.out = out_;
    options.display.terminal = 0;
    options.host = &host;
    return RunLoop(options);
  }

  std::string Output() {
    std::fflush(out_);
    std::rewind(out_);
    std::string text;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), out_)) > 0) text.append(buf, n);
    return text;
  }

  std::unique_ptr<Journal> OpenJournal() {
    auto j = Journal::Open(dir_ + "/runs/t/run.db");
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    return std::move(*j);
  }

  std::vector<RoundRecord> Rounds() {
    auto j = OpenJournal();
    auto rounds = j->RoundsOf(1);
    EXPECT_TRUE(rounds.ok());
    return *rounds;
  }

  std::vector<AttemptRecord> AttemptsOf(int64_t round, const std::string& member) {
    auto j = OpenJournal();
    auto all = j->AttemptsOfRound(1, round);
    EXPECT_TRUE(all.ok());
    std::vector<AttemptRecord> out;
    for (const AttemptRecord& a : *all) {
      if (a.member == member) out.push_back(a);
    }
    return out;
  }

  uint64_t Current() {
    auto history = store::ReadHistory(dir_ + "/runs/t/store");
    EXPECT_TRUE(history.ok());
    return history->back().generation;
  }

  std::string dir_;
  std::FILE* out_ = nullptr;
  FakeWorkerOptions worker_;
  int64_t oracle_label_ = 1;
};

constexpr char kOracle[] = "[oracle]\nkind = \"command\"\ncommand = [\"oracle\"]\n";

TEST_F(ControllerTest, RunsEveryRoundAndCommitsEachAcquisition) {
  WriteConfig(3, "[stop]\nmax_rounds = 3\n");
  auto outcome = Run();
  ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
  EXPECT_EQ(*outcome, RunOutcome::kFinished);
  auto rounds = Rounds();
  ASSERT_EQ(rounds.size(), 3u);
  for (const RoundRecord& r : rounds) EXPECT_EQ(r.status, RoundStatus::kDone);
  // Rounds 0 and 1 acquire 2 each; the last one does not acquire.
  EXPECT_EQ(rounds[0].labels_total, 8);
  EXPECT_EQ(rounds[1].labels_total, 10);
  EXPECT_EQ(rounds[2].labels_total, 10);
  EXPECT_EQ(rounds[2].output_generation, rounds[2].input_generation);
  EXPECT_EQ(Current(), rounds[2].input_generation);
  // The fake members put 0.7 on the true class: the ensemble is always right.
  EXPECT_DOUBLE_EQ(rounds[2].test.accuracy.value_or(0), 1.0);
  EXPECT_NE(Output().find("3 rounds done (stop.max_rounds)"), std::string::npos) << Output();
}

TEST_F(ControllerTest, StopsWhenTheTargetIsReached) {
  WriteConfig(2, "[stop]\nmax_rounds = 5\ntarget = { metric = \"accuracy\", value = 0.9 }\n");
  auto outcome = Run();
  ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
  EXPECT_EQ(Rounds().size(), 1u);
  EXPECT_NE(Output().find("the ensemble's test accuracy reached 0.9"), std::string::npos);
}

TEST_F(ControllerTest, StopsWhenTheLabelBudgetIsSpentLandingExactlyOnIt) {
  WriteConfig(2, "[stop]\nlabel_budget = 3\n");
  ASSERT_TRUE(Run().ok());
  auto rounds = Rounds();
  ASSERT_EQ(rounds.size(), 3u);  // +2, +1 (the budget's rest), then the budget is spent
  EXPECT_EQ(rounds[0].labels_total, 8);
  EXPECT_EQ(rounds[1].labels_total, 9);
  EXPECT_NE(Output().find("the label budget of 3 is spent"), std::string::npos);
}

TEST_F(ControllerTest, StopsWhenThePoolIsExhausted) {
  WriteConfig(2, "[stop]\nmax_rounds = 10\n");
  ASSERT_TRUE(Run().ok());
  auto rounds = Rounds();
  ASSERT_EQ(rounds.size(), 5u);  // 7 pool samples: 2 + 2 + 2 + 1, then empty
  EXPECT_EQ(rounds.back().labels_total, 13);
  EXPECT_NE(Output().find("the pool is exhausted"), std::string::npos);
}

TEST_F(ControllerTest, AnUnreachableTargetOnAnEmptyPoolEndsTheRunInsteadOfLoopingForever) {
  WriteConfig(2,
              "[stop]\ntarget = { metric = \"accuracy\", value = 1.5 }\n"
              "stop_when_pool_exhausted = false\n");
  // Accuracy 1.5 can never be reached; without a max_rounds, once the pool is empty the loop
  // would retrain the same generation forever.
  auto outcome = Run();
  ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
  auto rounds = Rounds();
  ASSERT_EQ(rounds.size(), 5u);
  EXPECT_NE(Output().find("nothing is left to acquire, and the ensemble's test accuracy did not "
                          "reach 1.5"),
            std::string::npos)
      << Output();
}

TEST_F(ControllerTest, AnEmptyPoolUnderMaxRoundsRetrainsUntilTheLastRound) {
  WriteConfig(1, "[stop]\nmax_rounds = 6\nstop_when_pool_exhausted = false\n");
  ASSERT_TRUE(Run().ok());
  auto rounds = Rounds();
  ASSERT_EQ(rounds.size(), 6u);
  EXPECT_EQ(rounds[4].input_generation, rounds[5].input_generation);  // nothing to commit
}

TEST_F(ControllerTest, ARoundWithTooFewMembersFailsAndARerunRetriesIt) {
  worker_.plan = [](const std::string& member, int64_t, int attempt) {
    FakeAttempt a;
    if (member == "m1" && attempt <= 2) a.outcome = Outcome::kCrashInTraining;
    return a;
  };
  WriteConfig(2, "[stop]\nmax_rounds = 1\n[failure]\nretries = 1\n");
  auto failed = Run();
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("round 0 failed: 1 of 2 members finished, "
                                           "min_members is 2; m1: worker killed by signal 11"),
            std::string::npos)
      << failed.status().ToString();
  auto rounds = Rounds();
  ASSERT_EQ(rounds.size(), 1u);
  EXPECT_EQ(rounds[0].status, RoundStatus::kFailed);

  // Rerunning retries the failed member once more (attempt 3), and m0 keeps its attempt.
  auto again = Run();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(AttemptsOf(0, "m1").size(), 3u);
  EXPECT_EQ(AttemptsOf(0, "m0").size(), 1u);
  EXPECT_EQ(Rounds()[0].status, RoundStatus::kDone);
}

TEST_F(ControllerTest, MinMembersLetsARoundGoOnWithoutAFailedMember) {
  worker_.plan = [](const std::string& member, int64_t, int) {
    FakeAttempt a;
    if (member == "m2") a.outcome = Outcome::kErrorEvent;
    return a;
  };
  WriteConfig(3, "[stop]\nmax_rounds = 2\n[failure]\nretries = 0\nmin_members = 2\n");
  auto outcome = Run();
  ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
  auto rounds = Rounds();
  ASSERT_EQ(rounds.size(), 2u);
  EXPECT_NE(Output().find("round 0: 2/3 members"), std::string::npos) << Output();
}

TEST_F(ControllerTest, OneInterruptStopsAfterTheRoundAndTheRunResumes) {
  WriteConfig(2, "[stop]\nmax_rounds = 3\n");
  auto stopped = Run({milliseconds(500)});
  ASSERT_TRUE(stopped.ok()) << stopped.status().ToString();
  EXPECT_EQ(*stopped, RunOutcome::kStopped);
  auto rounds = Rounds();
  ASSERT_EQ(rounds.size(), 1u);
  EXPECT_EQ(rounds[0].status, RoundStatus::kDone);

  auto finished = Run();
  ASSERT_TRUE(finished.ok()) << finished.status().ToString();
  EXPECT_EQ(*finished, RunOutcome::kFinished);
  EXPECT_EQ(Rounds().size(), 3u);
}

TEST_F(ControllerTest, RetryCountsSurviveAResumeAndInterruptedAttemptsAreFree) {
  // m0: attempt 1 fails (counted); attempt 2 is cut by Ctrl-C twice (not counted); on resume
  // attempt 3 is its last try (retries = 1), and it fails too: the round fails.
  worker_.plan = [](const std::string& member, int64_t, int attempt) {
    FakeAttempt a;
    if (member != "m0") return a;
    if (attempt == 1 || attempt == 3) a.outcome = Outcome::kErrorEvent;
    a.train_time = std::chrono::seconds(attempt == 2 ? 60 : 2);
    return a;
  };
  WriteConfig(2, "[stop]\nmax_rounds = 1\n[failure]\nretries = 1\n");
  auto stopped = Run({milliseconds(10000), milliseconds(10100)});
  ASSERT_TRUE(stopped.ok()) << stopped.status().ToString();
  EXPECT_EQ(*stopped, RunOutcome::kStopped);
  auto attempts = AttemptsOf(0, "m0");
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(attempts[0].status, AttemptStatus::kFailed);
  EXPECT_EQ(attempts[1].status, AttemptStatus::kInterrupted);

  auto failed = Run();
  ASSERT_FALSE(failed.ok());
  attempts = AttemptsOf(0, "m0");
  ASSERT_EQ(attempts.size(), 3u);
  EXPECT_EQ(attempts[2].attempt, 3);
  EXPECT_EQ(attempts[2].status, AttemptStatus::kFailed);
  EXPECT_EQ(AttemptsOf(0, "m1").size(), 1u);  // finished before the stop: kept
}

TEST_F(ControllerTest, AResumedRoundRemovesTheCheckpointTempsOfUnfinishedAttempts) {
  WriteConfig(2, "[stop]\nmax_rounds = 1\n");
  ASSERT_TRUE(Run({milliseconds(1000), milliseconds(1100)}).ok());  // stopped mid-training
  auto attempts = AttemptsOf(0, "m0");
  ASSERT_EQ(attempts.size(), 1u);
  ASSERT_EQ(attempts[0].status, AttemptStatus::kInterrupted);
  // What a worker killed while writing its checkpoint leaves (its pid is long gone).
  std::string checkpoint = dir_ + "/runs/t/" + RunPaths::AttemptDir("m0", 0, 1) + "/checkpoint.pt";
  fs::create_directories(fs::path(checkpoint).parent_path());
  std::string stale = checkpoint + ".tmp." + UniqueTempName("x").substr(6);
  stale = stale.substr(0, stale.rfind('.', stale.rfind('.') - 1)) + ".999999999.0";
  std::ofstream(stale) << "half a checkpoint";
  ASSERT_TRUE(fs::exists(stale));
  ASSERT_TRUE(Run().ok());
  EXPECT_FALSE(fs::exists(stale)) << stale;
}

TEST_F(ControllerTest, ATwiceInterruptedRoundResumesToTheSameEndAsAnUninterruptedRun) {
  WriteConfig(3, "[stop]\nmax_rounds = 3\n");
  ASSERT_TRUE(Run({milliseconds(3000), milliseconds(3100)}).ok());
  ASSERT_TRUE(Run().ok());
  auto resumed = Rounds();
  auto j = OpenJournal();
  std::vector<std::vector<AcquiredSample>> picks;
  for (int r = 0; r < 2; ++r) picks.push_back(*j->AcquisitionsOf(1, r));

  fs::remove_all(dir_ + "/runs");
  ASSERT_TRUE(Run().ok());
  auto straight = Rounds();
  ASSERT_EQ(resumed.size(), straight.size());
  for (size_t r = 0; r < straight.size(); ++r) {
    EXPECT_EQ(resumed[r].output_generation, straight[r].output_generation);
    EXPECT_EQ(resumed[r].labels_total, straight[r].labels_total);
  }
  auto j2 = OpenJournal();
  for (int r = 0; r < 2; ++r) {
    auto again = *j2->AcquisitionsOf(1, r);
    ASSERT_EQ(again.size(), picks[r].size());
    for (size_t i = 0; i < again.size(); ++i) EXPECT_EQ(again[i].sample_id, picks[r][i].sample_id);
  }
}

TEST_F(ControllerTest, ARandomRoundSkipsThePoolPassAndPicksTheSeededDraw) {
  // Round 0 acquires at random (the cold start), round 1 by bald, round 2 is the last.
  std::string text = testing::LoopConfigText(dir_ + "/source", 2, 2, "[stop]\nmax_rounds = 3\n");
  const std::string entropy = "strategy = \"entropy\"\n";
  text.replace(text.find(entropy), entropy.size(),
               "strategy = \"bald\"\nseed = 5\ncold_start_rounds = 1\n");
  std::ofstream(dir_ + "/loop.toml") << text;
  auto outcome = Run();
  ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
  ASSERT_EQ(Rounds().size(), 3u);
  for (const std::string member : {"m0", "m1"}) {
    for (int64_t round : {0, 1, 2}) {
      auto attempts = AttemptsOf(round, member);
      ASSERT_EQ(attempts.size(), 1u);
      const bool pool =
          attempts[0].predictions_json.value_or("").find("\"pool\"") != std::string::npos;
      EXPECT_EQ(pool, round == 1) << member << " round " << round;
    }
  }
  // The picks are the seeded draw over equal scores, as when the pool was predicted.
  auto snap = store::Snapshot::Open(dir_ + "/runs/t/store", Rounds()[0].input_generation);
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  const std::vector<uint64_t> pool = (*(*snap)->table("pool"))->Ids();
  auto drawn = SelectBatch(std::vector<double>(pool.size(), 0.0), 2, RoundSeed(5, 0), {}, {});
  ASSERT_TRUE(drawn.ok());
  auto picks = *OpenJournal()->AcquisitionsOf(1, 0);
  ASSERT_EQ(picks.size(), 2u);
  for (size_t i = 0; i < picks.size(); ++i) {
    EXPECT_EQ(static_cast<uint64_t>(picks[i].sample_id), pool[static_cast<size_t>((*drawn)[i])]);
  }
}

}  // namespace
}  // namespace cohort::loop

namespace cohort::loop {
namespace {

TEST_F(ControllerTest, AnOracleLabelOutsideTheClassesIsNeverCommittedAndTheRoundFails) {
  WriteConfig(2, std::string(kOracle) + "[stop]\nmax_rounds = 2\n");
  oracle_label_ = 99;
  auto outcome = Run();
  ASSERT_FALSE(outcome.ok());
  const std::string& m = outcome.status().message();
  EXPECT_NE(m.find("round 0: oracle oracle: "), std::string::npos) << m;
  EXPECT_NE(m.find("2 label(s) outside [0, 3) at sample id"), std::string::npos) << m;
  EXPECT_NE(m.find("(label 99)"), std::string::npos) << m;
  auto rounds = Rounds();
  ASSERT_EQ(rounds.size(), 1u);
  EXPECT_EQ(rounds[0].status, RoundStatus::kFailed);
  EXPECT_NE(rounds[0].error.value_or("").find("label(s) outside [0, 3)"), std::string::npos);
  EXPECT_EQ(Current(), rounds[0].input_generation);  // nothing committed
  // The answer was not kept: a fixed oracle is asked again and the run goes on.
  oracle_label_ = 2;
  outcome = Run();
  ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
  rounds = Rounds();
  ASSERT_EQ(rounds.size(), 2u);
  EXPECT_EQ(rounds[0].status, RoundStatus::kDone);
  EXPECT_EQ(rounds[0].labels_total, 8);
  // The members who finished before the failure were not trained again.
  EXPECT_EQ(AttemptsOf(0, "m0").size(), 1u);
}

TEST_F(ControllerTest, AFinishedAttemptWhosePredictionsNoLongerPassIsTrainedAgainOnResume) {
  WriteConfig(2, std::string(kOracle) + "[stop]\nmax_rounds = 2\n");
  oracle_label_ = -1000;  // the oracle exits 3: round 0 fails after its members finished
  auto outcome = Run();
  ASSERT_FALSE(outcome.ok());
  EXPECT_NE(outcome.status().message().find("oracle oracle exited with status 3"),
            std::string::npos)
      << outcome.status().message();
  auto attempts = AttemptsOf(0, "m0");
  ASSERT_EQ(attempts.size(), 1u);
  ASSERT_EQ(attempts[0].status, AttemptStatus::kDone);
  // m0's test predictions are replaced by 7-class ones (as a run from before the checks
  // could have journalled done).
  auto predictions = nlohmann::json::parse(attempts[0].predictions_json.value_or("{}"));
  std::string test_file = dir_ + "/runs/t/" + predictions.value("test", "");
  store::HostArray seven(store::Dtype::kFloat32, {6, 7});
  for (uint64_t i = 0; i < 6 * 7; ++i) seven.as<float>()[i] = 1.0f / 7;
  ASSERT_TRUE(store::WriteNpyFile(test_file, seven).ok());
  oracle_label_ = 0;
  outcome = Run();
  ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
  attempts = AttemptsOf(0, "m0");
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(attempts[0].status, AttemptStatus::kFailed);
  EXPECT_NE(attempts[0].exit.value_or("").find("its predictions failed the check when the run "
                                               "resumed: predictions-test.npy: 7 classes where "
                                               "the run has 3"),
            std::string::npos)
      << attempts[0].exit.value_or("");
  EXPECT_EQ(attempts[1].status, AttemptStatus::kDone);
  EXPECT_EQ(AttemptsOf(0, "m1").size(), 1u);
  EXPECT_EQ(Rounds().size(), 2u);
}

}  // namespace
}  // namespace cohort::loop
