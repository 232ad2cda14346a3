// The Scheduler on a launch::FakeProcessHost: retries, timeouts, kills and interrupts in virtual
// time.
#include "loop/schedule/scheduler.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "common/worker_protocol.h"
#include "launch/testing/fake_process_host.h"
#include "loop/config/testing/source_store.h"
#include "loop/run/run_dir.h"
#include "loop/schedule/testing/fake_worker.h"
#include "loop/schedule/testing/recording_observer.h"

namespace cohort::loop {
namespace {

namespace fs = std::filesystem;
using Outcome = FakeAttempt::Outcome;
using std::chrono::milliseconds;
using std::chrono::seconds;

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = store::testing::ScratchDir();
    testing::MakeSourceStore(dir_ + "/source", 6, 9, 6);
  }

  // Opens the run for `members` members on `devices` devices and makes the scheduler.
  void Open(int members, int devices, const std::string& extra = "") {
    text_ = testing::LoopConfigText(dir_ + "/source", members, devices, extra);
    auto config = ParseLoopConfig(text_, dir_ + "/loop.toml");
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    config_ = *config;
    auto run = OpenRunDir(config_, text_);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    run_ = std::move(*run);
    host_ =
        std::make_unique<launch::FakeProcessHost>(FakeWorkerFactory(worker_), milliseconds(5000));
    SchedulerOptions options;
    options.devices = config_.devices;
    options.member_binary = "cohort-member";
    options.heartbeat_timeout = seconds(10);
    options.attempt_timeout = attempt_timeout_;
    options.log_limit_bytes = log_limit_bytes_;
    auto s = Scheduler::Create(options, run_.paths, run_.journal.get(), run_.run.id, host_.get(),
                               &observer_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    scheduler_ = std::move(*s);
  }

  std::vector<MemberTask> Tasks(std::vector<size_t> order = {}) {
    if (order.empty()) {
      for (size_t i = 0; i < config_.members.size(); ++i) order.push_back(i);
    }
    std::vector<MemberTask> tasks;
    for (size_t i : order) {
      MemberTask t;
      t.index = i;
      t.member = &config_.members[i];
      t.attempts_left = static_cast<int>(1 + config_.failure.retries);
      tasks.push_back(t);
    }
    return tasks;
  }

  Status RunRound(int64_t round = 0, std::vector<size_t> order = {}) {
    Status begun = run_.journal->BeginRound(run_.run.id, round, 1);
    if (!begun.ok()) return begun;
    results_.assign(config_.members.size(), MemberResult{});
    PredictionShape shape;
    shape.pool_rows = 9;
    shape.test_rows = 6;
    shape.classes = 3;
    auto snap = store::Snapshot::Open(run_.paths.store(), 1);
    if (snap.ok()) {
      shape.pool_ids = (*(*snap)->table("pool"))->Ids();
      shape.test_ids = (*(*snap)->table("test"))->Ids();
    }
    return scheduler_->RunRound(round, 1, config_, shape, Tasks(order), &results_, &stats_);
  }

  // Attempts of round 0 as "member#attempt status: exit".
  std::map<std::string, AttemptRecord> Attempts(int64_t round = 0) {
    std::map<std::string, AttemptRecord> out;
    auto attempts = run_.journal->AttemptsOfRound(run_.run.id, round);
    EXPECT_TRUE(attempts.ok());
    for (const AttemptRecord& a : *attempts) out[a.member + "#" + std::to_string(a.attempt)] = a;
    return out;
  }

  size_t WorkersStarted() const {
    size_t n = 0;
    for (const auto& spec : host_->started()) n += spec.argv.size() > 1 && spec.argv[1] == "worker";
    return n;
  }

  std::string dir_;
  std::string text_;
  LoopConfig config_;
  OpenRun run_;
  FakeWorkerOptions worker_;
  milliseconds attempt_timeout_{0};
  uint64_t log_limit_bytes_ = uint64_t{64} << 20;
  std::unique_ptr<launch::FakeProcessHost> host_;
  testing::RecordingObserver observer_;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<MemberResult> results_;
  PhaseStats stats_;
};

TEST_F(SchedulerTest, EveryMemberFinishesOnPersistentWorkers) {
  Open(3, 2);
  ASSERT_TRUE(RunRound().ok());
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(results_[i].done) << i;
    EXPECT_EQ(results_[i].attempt, 1);
    EXPECT_TRUE(fs::exists(run_.paths.Absolute(results_[i].predictions_pool)));
    EXPECT_TRUE(fs::exists(run_.paths.Absolute(results_[i].predictions_test)));
  }
  for (auto& [name, a] : Attempts()) {
    EXPECT_EQ(a.status, AttemptStatus::kDone) << name;
    EXPECT_EQ(a.exit.value_or(""), "done");
    EXPECT_EQ(a.node.value_or(""), "fake-node") << name;  // from the worker's hello
    EXPECT_FALSE(a.gpus.has_value()) << name;             // CPU devices: no GPU
  }
  EXPECT_EQ(WorkersStarted(), 2u);  // one per device, reused by the third member
  // Start 0.3 s, then per member 2 s training and 2 x 0.2 s predicting: the device that ran
  // two members is busy 0.3 + 2 x 2.4 = 5.1 s.
  EXPECT_NEAR(stats_.wall_s, 5.1, 0.3);
  EXPECT_NEAR(stats_.predict_s, 3 * 0.4, 1e-9);
  // The next round reuses the workers: no new process.
  ASSERT_TRUE(RunRound(1).ok());
  EXPECT_EQ(WorkersStarted(), 2u);
}

TEST_F(SchedulerTest, MembersStartInTheOrderGiven) {
  std::vector<std::string> commands;
  worker_.commands = &commands;
  Open(3, 1);
  ASSERT_TRUE(RunRound(0, {2, 0, 1}).ok());
  std::vector<std::string> trained;
  for (const std::string& c : commands) {
    auto j = nlohmann::json::parse(c);
    if (j["op"] == "train") trained.push_back(j["member"]);
  }
  EXPECT_EQ(trained, (std::vector<std::string>{"m2", "m0", "m1"}));
}

TEST_F(SchedulerTest, AnErrorEventIsRetriedOnTheSameWorker) {
  worker_.plan = [](const std::string& member, int64_t, int attempt) {
    FakeAttempt a;
    if (member == "m0" && attempt == 1) a.outcome = Outcome::kErrorEvent;
    return a;
  };
  Open(1, 1);
  ASSERT_TRUE(RunRound().ok());
  auto attempts = Attempts();
  EXPECT_EQ(attempts["m0#1"].status, AttemptStatus::kFailed);
  EXPECT_EQ(attempts["m0#1"].exit.value_or(""), "loss diverged");
  EXPECT_EQ(attempts["m0#2"].status, AttemptStatus::kDone);
  EXPECT_EQ(WorkersStarted(), 1u);
  EXPECT_TRUE(observer_.Has("failed-retrying m0#1: loss diverged"));
  EXPECT_TRUE(results_[0].done);
}

TEST_F(SchedulerTest, PredictionsOfAnotherWidthFailTheAttempt) {
  // m0's first attempt predicts 7 classes where the run has 3; its retry predicts 3.
  int calls = 0;
  worker_.predict = [&calls](const std::string& member, const store::Table& table) {
    int64_t classes = member == "m0" && calls++ < 2 ? 7 : 3;
    return DefaultFakePredictions(table, classes);
  };
  Open(2, 1);
  ASSERT_TRUE(RunRound().ok());
  auto attempts = Attempts();
  EXPECT_EQ(attempts["m0#1"].status, AttemptStatus::kFailed);
  EXPECT_NE(attempts["m0#1"].exit->find("predictions-pool.npy: 7 classes where the run has 3"),
            std::string::npos)
      << *attempts["m0#1"].exit;
  EXPECT_EQ(attempts["m0#2"].status, AttemptStatus::kDone);
  EXPECT_EQ(attempts["m1#1"].status, AttemptStatus::kDone);
  EXPECT_TRUE(results_[0].done);
}

TEST_F(SchedulerTest, ABadRowIsNamedByMemberAndSampleId) {
  worker_.predict = [](const std::string& member, const store::Table& table) {
    std::vector<float> probs = DefaultFakePredictions(table, 3);
    if (member == "m0") probs[3 * 2] = std::nanf("");  // row 2
    return probs;
  };
  Open(1, 1, "[failure]\nretries = 0\n");
  ASSERT_TRUE(RunRound().ok());
  auto attempts = Attempts();
  EXPECT_EQ(attempts["m0#1"].status, AttemptStatus::kFailed);
  EXPECT_NE(attempts["m0#1"].exit->find("predictions-pool.npy: member m0 row 2 (sample id "),
            std::string::npos)
      << *attempts["m0#1"].exit;
  EXPECT_FALSE(results_[0].done);
}

TEST_F(SchedulerTest, ACrashedWorkerIsReplaced) {
  worker_.plan = [](const std::string&, int64_t, int attempt) {
    FakeAttempt a;
    if (attempt == 1) a.outcome = Outcome::kCrashInTraining;
    return a;
  };
  Open(1, 1);
  ASSERT_TRUE(RunRound().ok());
  auto attempts = Attempts();
  EXPECT_EQ(attempts["m0#1"].status, AttemptStatus::kFailed);
  EXPECT_NE(attempts["m0#1"].exit->find("signal 11"), std::string::npos) << *attempts["m0#1"].exit;
  EXPECT_EQ(attempts["m0#2"].status, AttemptStatus::kDone);
  EXPECT_EQ(WorkersStarted(), 2u);
  EXPECT_NE(attempts["m0#1"].pid, attempts["m0#2"].pid);
}

TEST_F(SchedulerTest, ASilentWorkerIsKilledAtTheHeartbeatTimeout) {
  worker_.plan = [](const std::string&, int64_t, int attempt) {
    FakeAttempt a;
    if (attempt == 1) a.outcome = Outcome::kHangInTraining;
    return a;
  };
  Open(1, 1);
  ASSERT_TRUE(RunRound().ok());
  auto attempts = Attempts();
  EXPECT_EQ(attempts["m0#1"].status, AttemptStatus::kKilled);
  EXPECT_NE(attempts["m0#1"].exit->find("heartbeat timeout"), std::string::npos)
      << *attempts["m0#1"].exit;
  EXPECT_EQ(attempts["m0#2"].status, AttemptStatus::kDone);
  // Killed about 10 s after its last heartbeat, then a fresh worker trained it.
  EXPECT_GT(host_->elapsed(), seconds(10));
  EXPECT_LT(host_->elapsed(), seconds(16));
}

TEST_F(SchedulerTest, AnAttemptPastItsTimeoutIsKilledAndAStubbornOneGetsSigkill) {
  attempt_timeout_ = seconds(30);
  // Round 0: the first attempt would train for 10 minutes. Round 1: it hangs and ignores
  // SIGTERM.
  worker_.plan = [](const std::string&, int64_t round, int attempt) {
    FakeAttempt a;
    if (attempt == 1 && round == 0) a.train_time = std::chrono::minutes(10);
    if (attempt == 1 && round == 1) a.outcome = Outcome::kIgnoreTerminate;
    return a;
  };
  Open(1, 1, "[failure]\nheartbeat_timeout_s = 10\n");
  ASSERT_TRUE(RunRound().ok());
  auto attempts = Attempts();
  EXPECT_EQ(attempts["m0#1"].status, AttemptStatus::kKilled);
  EXPECT_NE(attempts["m0#1"].exit->find("attempt_timeout_s (30 s)"), std::string::npos)
      << *attempts["m0#1"].exit;
  EXPECT_EQ(attempts["m0#2"].status, AttemptStatus::kDone);

  // One that ignores SIGTERM (sent for its silence) is killed after the grace.
  ASSERT_TRUE(RunRound(1).ok());
  auto again = Attempts(1);
  EXPECT_EQ(again["m0#1"].status, AttemptStatus::kKilled);
  EXPECT_NE(again["m0#1"].exit->find("heartbeat timeout"), std::string::npos)
      << *again["m0#1"].exit;
  EXPECT_NE(again["m0#1"].exit->find("signal 9"), std::string::npos) << *again["m0#1"].exit;
  EXPECT_EQ(again["m0#2"].status, AttemptStatus::kDone);
}

TEST_F(SchedulerTest, AMemberOutOfAttemptsFailsWithoutHoldingUpTheOthers) {
  worker_.plan = [](const std::string& member, int64_t, int) {
    FakeAttempt a;
    if (member == "m1") a.outcome = Outcome::kErrorEvent;
    return a;
  };
  Open(3, 2, "[failure]\nretries = 1\n");
  ASSERT_TRUE(RunRound().ok());
  EXPECT_TRUE(results_[0].done);
  EXPECT_FALSE(results_[1].done);
  EXPECT_EQ(results_[1].error, "loss diverged");
  EXPECT_EQ(results_[1].attempt, 2);
  EXPECT_TRUE(results_[2].done);
  EXPECT_TRUE(observer_.Has("failed-retrying m1#1"));
  EXPECT_TRUE(observer_.Has("failed-final m1#2"));
  EXPECT_EQ(Attempts().size(), 4u);
}

TEST_F(SchedulerTest, OneInterruptLetsTheRoundFinish) {
  Open(2, 1);
  host_->InterruptAt(milliseconds(1000));
  ASSERT_TRUE(RunRound().ok());
  EXPECT_EQ(scheduler_->interrupts(), 1);
  EXPECT_TRUE(results_[0].done);
  EXPECT_TRUE(results_[1].done);
  ASSERT_FALSE(observer_.notes.empty());
  EXPECT_NE(observer_.notes[0].find("finishing the running round"), std::string::npos);
}

TEST_F(SchedulerTest, TwoInterruptsStopEverythingAndBlameNoMember) {
  Open(3, 2);
  host_->InterruptAt(milliseconds(1000));
  host_->InterruptAt(milliseconds(1100));
  Status st = RunRound();
  EXPECT_EQ(st.code(), Status::Code::kAborted) << st.ToString();
  auto attempts = Attempts();
  ASSERT_EQ(attempts.size(), 2u);  // m2 never started
  for (auto& [name, a] : attempts) {
    EXPECT_EQ(a.status, AttemptStatus::kInterrupted) << name;
    EXPECT_EQ(a.exit.value_or(""), "interrupted (Ctrl-C)");
  }
  EXPECT_TRUE(observer_.Has("failed-stopped m0#1"));
  EXPECT_FALSE(observer_.Has("failed-retrying"));
  EXPECT_EQ(host_->live(), 0u);
}

TEST_F(SchedulerTest, AWorkerOfAnotherProtocolVersionIsStopped) {
  worker_.hello_version = 2;
  Open(1, 1, "[failure]\nretries = 1\n");
  ASSERT_TRUE(RunRound().ok());
  EXPECT_FALSE(results_[0].done);
  ASSERT_FALSE(observer_.notes.empty());
  EXPECT_NE(observer_.notes[0].find("speaks protocol version 2, not 1"), std::string::npos)
      << observer_.notes[0];
}

TEST_F(SchedulerTest, StrayStdoutLinesGoToTheWorkerLogInOrder) {
  worker_.stray_lines = {"loading libraries", "warning: something"};
  Open(1, 1);
  ASSERT_TRUE(RunRound().ok());
  ASSERT_TRUE(RunRound(1).ok());
  auto attempts = Attempts();
  std::ifstream log(run_.paths.Absolute(*attempts["m0#1"].log_path));
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "loading libraries\nwarning: something\n");
  // The attempt's own slice of the log is kept beside its outputs.
  EXPECT_TRUE(fs::exists(run_.paths.Absolute(
      RunPaths::AttemptFile(RunPaths::AttemptDir("m0", 0, 1), protocol::file::kWorkerLog))));
}

TEST_F(SchedulerTest, AWorkerLogPastItsCapIsRotated) {
  // 200 lines of 50 bytes (10 KB) against a 4 KB cap.
  for (int i = 0; i < 200; ++i) worker_.stray_lines.push_back(fmt::format("{:049d}", i));
  log_limit_bytes_ = 4096;
  Open(1, 1);
  ASSERT_TRUE(RunRound().ok());
  ASSERT_TRUE(RunRound(1).ok());  // the worker serves on after the rotation
  auto attempts = Attempts();
  std::string log = run_.paths.Absolute(*attempts["m0#1"].log_path);
  ASSERT_TRUE(fs::exists(log + ".1"));
  EXPECT_GT(fs::file_size(log + ".1"), 4096u);  // everything up to the rotation
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_LT(text.size(), 4096u);
  EXPECT_NE(text.find("[cohort: this log passed 4096 bytes; its earlier part is in"),
            std::string::npos)
      << text;
  EXPECT_EQ(Attempts(1)["m0#1"].status, AttemptStatus::kDone);
}

TEST_F(SchedulerTest, ShutdownEndsIdleWorkersCleanly) {
  Open(2, 2);
  ASSERT_TRUE(RunRound().ok());
  EXPECT_EQ(host_->live(), 2u);
  scheduler_->Shutdown(seconds(5));
  EXPECT_EQ(host_->live(), 0u);
}

}  // namespace
}  // namespace cohort::loop
