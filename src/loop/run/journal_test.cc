#include "loop/run/journal.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>

namespace cohort::loop {
namespace {

// A fresh, empty directory for the running test, under $COHORT_TEST_TMP when set.
std::string ScratchDir() {
  const char* root = std::getenv("COHORT_TEST_TMP");
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::path dir = std::filesystem::path(root != nullptr ? root : ::testing::TempDir()) /
                              (std::string(info->test_suite_name()) + "." + info->name() + "." +
                               std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::unique_ptr<Journal> MustOpen(const std::string& path) {
  auto j = Journal::Open(path);
  EXPECT_TRUE(j.ok()) << j.status().ToString();
  return j.ok() ? std::move(j).value() : nullptr;
}

RunStart SampleRun(const std::string& name = "fmnist") {
  return RunStart{name, "[run]\nname = \"" + name + "\"\n", "fp-1234", "/data/store", 7};
}

// Runs `sql` (several statements may follow one another) on a plain SQLite connection to
// `path`, as another program editing the journal would: an old schema, a foreign database.
void RawExec(const std::string& path, const char* sql) {
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
  const int rc = sqlite3_exec(raw, sql, nullptr, nullptr, nullptr);
  const std::string error = sqlite3_errmsg(raw);
  sqlite3_close(raw);
  ASSERT_EQ(rc, SQLITE_OK) << error;
}

// Runs `sql` on a plain SQLite connection to `path` and returns the first column of the first
// row as text.
std::string QueryOne(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  std::string out;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW) {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    out = p == nullptr ? "NULL" : p;
  } else {
    ADD_FAILURE() << sql << ": " << sqlite3_errmsg(db);
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return out;
}

TEST(JournalTest, CreateAndReopenKeepsData) {
  std::string path = ScratchDir() + "/run.db";
  int64_t run_id = 0;
  {
    auto j = MustOpen(path);
    ASSERT_NE(j, nullptr);
    auto id = j->StartRun(SampleRun());
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    run_id = *id;
    ASSERT_TRUE(j->BeginRound(run_id, 0, 7).ok());
  }
  auto j = MustOpen(path);
  ASSERT_NE(j, nullptr);
  auto run = j->FindRun("fmnist");
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(run->id, run_id);
  EXPECT_EQ(run->config_toml, SampleRun().config_toml);
  EXPECT_EQ(run->config_fingerprint, "fp-1234");
  EXPECT_EQ(run->source_store, "/data/store");
  EXPECT_EQ(run->source_generation, 7u);
  EXPECT_EQ(run->status, RunStatus::kRunning);
  EXPECT_FALSE(run->ended_at.has_value());
  EXPECT_EQ(run->started_at.size(), 24u) << run->started_at;  // 2024-01-02T03:04:05.678Z
  EXPECT_EQ(run->started_at.back(), 'Z');
  auto rounds = j->RoundsOf(run_id);
  ASSERT_TRUE(rounds.ok());
  ASSERT_EQ(rounds->size(), 1u);
  EXPECT_EQ((*rounds)[0].input_generation, 7u);

  EXPECT_TRUE(j->FindRun("other").status().IsNotFound());
  EXPECT_EQ(j->StartRun(SampleRun()).status().code(), Status::Code::kAlreadyExists);

  EXPECT_EQ(QueryOne(path, "PRAGMA journal_mode"), "wal");
  EXPECT_EQ(QueryOne(path, "PRAGMA user_version"), std::to_string(kJournalSchemaVersion));

  ASSERT_TRUE(j->SetRunStatus(run_id, RunStatus::kStopped).ok());
  EXPECT_TRUE(j->FindRun("fmnist")->ended_at.has_value());
  ASSERT_TRUE(j->SetRunStatus(run_id, RunStatus::kRunning).ok());  // resumed
  EXPECT_FALSE(j->FindRun("fmnist")->ended_at.has_value());
  EXPECT_TRUE(j->SetRunStatus(run_id + 100, RunStatus::kFailed).IsNotFound());
}

TEST(JournalTest, FullRoundLifecycle) {
  std::string path = ScratchDir() + "/run.db";
  auto j = MustOpen(path);
  ASSERT_NE(j, nullptr);
  int64_t run = *j->StartRun(SampleRun());

  ASSERT_TRUE(j->BeginRound(run, 0, 3).ok());
  EXPECT_EQ(j->BeginRound(run, 0, 3).code(), Status::Code::kAlreadyExists);
  for (RoundStatus phase : {RoundStatus::kPredicting, RoundStatus::kAcquiring,
                            RoundStatus::kLabelling, RoundStatus::kCommitting}) {
    ASSERT_TRUE(j->SetRoundPhase(run, 0, phase).ok());
    EXPECT_EQ((*j->LastRound(run))->status, phase);
  }
  EXPECT_TRUE(j->SetRoundPhase(run, 0, RoundStatus::kDone).IsInvalidArgument());
  EXPECT_TRUE(j->SetRoundPhase(run, 5, RoundStatus::kPredicting).IsNotFound());

  RoundOutcome outcome;
  outcome.output_generation = 4;
  outcome.labels_total = 1100;
  outcome.timings = {10.5, 2.25, 0.5, 0.125, 1.0, 3.0};
  outcome.test.accuracy = 0.875;
  outcome.test.nll = 0.42;
  outcome.test.brier = 0.2;
  // ECE left unset: stored as NULL.
  ASSERT_TRUE(j->FinishRound(run, 0, outcome).ok());

  ASSERT_TRUE(j->BeginRound(run, 1, 4).ok());
  ASSERT_TRUE(j->FailRound(run, 1, "2 of 3 members failed; min_members is 3").ok());

  auto rounds = j->RoundsOf(run);
  ASSERT_TRUE(rounds.ok()) << rounds.status().ToString();
  ASSERT_EQ(rounds->size(), 2u);
  const RoundRecord& r0 = (*rounds)[0];
  EXPECT_EQ(r0.run_id, run);
  EXPECT_EQ(r0.round, 0);
  EXPECT_EQ(r0.input_generation, 3u);
  EXPECT_EQ(r0.output_generation, std::optional<uint64_t>(4));
  EXPECT_EQ(r0.status, RoundStatus::kDone);
  EXPECT_TRUE(r0.ended_at.has_value());
  EXPECT_EQ(r0.labels_total, std::optional<int64_t>(1100));
  EXPECT_DOUBLE_EQ(r0.timings.train_s, 10.5);
  EXPECT_DOUBLE_EQ(r0.timings.predict_s, 2.25);
  EXPECT_DOUBLE_EQ(r0.timings.acquire_s, 0.5);
  EXPECT_DOUBLE_EQ(r0.timings.label_s, 0.125);
  EXPECT_DOUBLE_EQ(r0.timings.commit_s, 1.0);
  EXPECT_DOUBLE_EQ(r0.timings.idle_s, 3.0);
  EXPECT_EQ(r0.test.accuracy, std::optional<double>(0.875));
  EXPECT_EQ(r0.test.nll, std::optional<double>(0.42));
  EXPECT_EQ(r0.test.brier, std::optional<double>(0.2));
  EXPECT_FALSE(r0.test.ece.has_value());
  EXPECT_FALSE(r0.error.has_value());

  const RoundRecord& r1 = (*rounds)[1];
  EXPECT_EQ(r1.status, RoundStatus::kFailed);
  EXPECT_FALSE(r1.output_generation.has_value());
  EXPECT_EQ(r1.error, std::optional<std::string>("2 of 3 members failed; min_members is 3"));
  EXPECT_EQ((*j->LastRound(run))->round, 1);

  // A round of a run that does not exist violates the foreign key.
  EXPECT_FALSE(j->BeginRound(run + 1, 0, 0).ok());
}

TEST(JournalTest, AttemptsEpochsMetricsAcquisitionsRoundTrip) {
  std::string path = ScratchDir() + "/run.db";
  auto j = MustOpen(path);
  ASSERT_NE(j, nullptr);
  int64_t run = *j->StartRun(SampleRun());
  ASSERT_TRUE(j->BeginRound(run, 0, 1).ok());

  auto a1 = j->BeginAttempt({run, 0, "mlp-a", 1, "cpu:0", 0, "members/mlp-a/r0/a1/worker.log"});
  ASSERT_TRUE(a1.ok()) << a1.status().ToString();
  ASSERT_TRUE(j->SetAttemptPid(*a1, 4242).ok());
  ASSERT_TRUE(j->AddEpochs(*a1, {{0, 1.5, 1.4, 0.6, 0.01, 2.0},
                                 {1, 0.9, std::nullopt, std::nullopt, 0.005, 2.5}})
                  .ok());
  ASSERT_TRUE(
      j->FinishAttempt(*a1, {AttemptStatus::kKilled, "signal 9 (heartbeat timeout)", "", "", ""})
          .ok());
  auto a2 = j->BeginAttempt({run, 0, "mlp-a", 2, "cpu:1", 4300, ""});
  ASSERT_TRUE(a2.ok());
  ASSERT_TRUE(j->FinishAttempt(
                   *a2, {AttemptStatus::kDone, "exit 0", R"({"accuracy":0.8})",
                         "members/mlp-a/r0/a2/checkpoint.pt", R"({"pool":"p.npy","test":"t.npy"})"})
                  .ok());
  EXPECT_EQ(j->BeginAttempt({run, 0, "mlp-a", 2, "cpu:1", 1, ""}).status().code(),
            Status::Code::kAlreadyExists);
  // SQLite would store NaN as NULL and read it back as 0: refused, nothing written.
  Status nan_epoch = j->AddEpochs(*a2, {{0, std::nan(""), std::nullopt, std::nullopt, 0.01, 1.0}});
  EXPECT_TRUE(nan_epoch.IsInvalidArgument()) << nan_epoch.ToString();
  EXPECT_NE(nan_epoch.message().find("train_loss"), std::string::npos);
  EXPECT_TRUE(j->EpochsOf(*a2)->empty());
  EXPECT_TRUE(j->RecordMemberMetrics(run, 0, "mlp-a", {{"nll", INFINITY}}).IsInvalidArgument());
  // Metrics must be JSON.
  auto a3 = j->BeginAttempt({run, 0, "cnn", 1, "cpu:0", 1, ""});
  ASSERT_TRUE(a3.ok());
  Status bad = j->FinishAttempt(*a3, {AttemptStatus::kDone, "exit 0", "{not json", "", ""});
  EXPECT_TRUE(bad.IsInvalidArgument()) << bad.ToString();
  EXPECT_NE(bad.message().find("finish attempt"), std::string::npos) << bad.ToString();
  EXPECT_NE(bad.message().find(path), std::string::npos) << bad.ToString();
  EXPECT_TRUE(j->FinishAttempt(*a3 + 100, {}).IsNotFound());

  auto attempts = j->AttemptsOfRound(run, 0);
  ASSERT_TRUE(attempts.ok()) << attempts.status().ToString();
  ASSERT_EQ(attempts->size(), 3u);
  const AttemptRecord& cnn = (*attempts)[0];  // ordered by member, attempt
  EXPECT_EQ(cnn.member, "cnn");
  EXPECT_EQ(cnn.status, AttemptStatus::kRunning);  // the failed FinishAttempt changed nothing
  const AttemptRecord& x1 = (*attempts)[1];
  EXPECT_EQ(x1.id, *a1);
  EXPECT_EQ(x1.member, "mlp-a");
  EXPECT_EQ(x1.attempt, 1);
  EXPECT_EQ(x1.device, "cpu:0");
  EXPECT_EQ(x1.pid, std::optional<int64_t>(4242));
  EXPECT_EQ(x1.status, AttemptStatus::kKilled);
  EXPECT_EQ(x1.exit, std::optional<std::string>("signal 9 (heartbeat timeout)"));
  EXPECT_EQ(x1.log_path, std::optional<std::string>("members/mlp-a/r0/a1/worker.log"));
  EXPECT_FALSE(x1.metrics_json.has_value());
  EXPECT_FALSE(x1.checkpoint.has_value());
  EXPECT_TRUE(x1.ended_at.has_value());
  const AttemptRecord& x2 = (*attempts)[2];
  EXPECT_EQ(x2.attempt, 2);
  EXPECT_EQ(x2.status, AttemptStatus::kDone);
  EXPECT_EQ(x2.metrics_json, std::optional<std::string>(R"({"accuracy":0.8})"));
  EXPECT_EQ(x2.checkpoint, std::optional<std::string>("members/mlp-a/r0/a2/checkpoint.pt"));
  EXPECT_EQ(x2.predictions_json, std::optional<std::string>(R"({"pool":"p.npy","test":"t.npy"})"));
  EXPECT_FALSE(x2.log_path.has_value());

  auto epochs = j->EpochsOf(*a1);
  ASSERT_TRUE(epochs.ok());
  ASSERT_EQ(epochs->size(), 2u);
  EXPECT_EQ((*epochs)[0].epoch, 0);
  EXPECT_DOUBLE_EQ((*epochs)[0].train_loss, 1.5);
  EXPECT_EQ((*epochs)[0].val_loss, std::optional<double>(1.4));
  EXPECT_EQ((*epochs)[0].val_accuracy, std::optional<double>(0.6));
  EXPECT_DOUBLE_EQ((*epochs)[0].lr.value_or(0), 0.01);
  EXPECT_DOUBLE_EQ((*epochs)[0].seconds, 2.0);
  EXPECT_FALSE((*epochs)[1].val_loss.has_value());
  // A batch with a duplicate epoch is rejected as a whole.
  EXPECT_FALSE(j->AddEpochs(*a1, {{2, 0.5, {}, {}, 0.001, 1}, {1, 0.5, {}, {}, 0.001, 1}}).ok());
  EXPECT_EQ(j->EpochsOf(*a1)->size(), 2u);
  EXPECT_FALSE(j->AddEpochs(*a3 + 100, {{0, 1, {}, {}, 0, 0}}).ok());  // no such attempt
  // An epoch without a learning rate (an outside member's) is stored as NULL, not 0.
  ASSERT_TRUE(j->AddEpochs(*a2, {{1, 0.7, {}, {}, std::nullopt, 1}}).ok());
  ASSERT_EQ(j->EpochsOf(*a2)->size(), 1u);
  EXPECT_FALSE((*j->EpochsOf(*a2))[0].lr.has_value());

  ASSERT_TRUE(j->RecordMemberMetrics(run, 0, "mlp-a", {{"accuracy", 0.8}, {"nll", 0.6}}).ok());
  ASSERT_TRUE(j->RecordMemberMetrics(run, 0, "cnn", {{"accuracy", 0.85}}).ok());
  ASSERT_TRUE(j->RecordMemberMetrics(run, 0, "cnn", {{"accuracy", 0.86}}).ok());  // replaces
  auto mm = j->MemberMetricsOf(run, 0);
  ASSERT_TRUE(mm.ok());
  EXPECT_EQ(mm->size(), 2u);
  EXPECT_DOUBLE_EQ((*mm)["mlp-a"]["nll"], 0.6);
  EXPECT_DOUBLE_EQ((*mm)["cnn"]["accuracy"], 0.86);

  std::vector<AcquiredSample> picks;
  picks.reserve(500);
  for (int i = 0; i < 500; i++) picks.push_back({1000 + (i * 7919) % 5000, 2.0 - i * 0.001});
  ASSERT_TRUE(j->RecordAcquisition(run, 0, picks).ok());
  auto got = j->AcquisitionsOf(run, 0);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), picks.size());
  for (std::size_t i = 0; i < picks.size(); i++) {
    EXPECT_EQ((*got)[i].sample_id, picks[i].sample_id);
    EXPECT_DOUBLE_EQ((*got)[i].score, picks[i].score);
  }
  // Redone after a resume: replaces the round's picks.
  ASSERT_TRUE(j->RecordAcquisition(run, 0, {{5, 1.0}, {6, 0.5}}).ok());
  EXPECT_EQ(j->AcquisitionsOf(run, 0)->size(), 2u);
  // A repeated sample id is refused and leaves the previous picks in place.
  EXPECT_FALSE(j->RecordAcquisition(run, 0, {{5, 1.0}, {5, 0.5}}).ok());
  EXPECT_EQ(j->AcquisitionsOf(run, 0)->size(), 2u);
  EXPECT_EQ(
      QueryOne(
          path,
          "SELECT group_concat(sample_id) FROM (SELECT sample_id FROM acquisitions ORDER BY rank)"),
      "5,6");
}

TEST(JournalTest, LastRoundAfterInterruptedRound) {
  std::string path = ScratchDir() + "/run.db";
  int64_t run = 0;
  int64_t done_id = 0;
  {
    auto j = MustOpen(path);
    ASSERT_NE(j, nullptr);
    run = *j->StartRun(SampleRun());
    ASSERT_TRUE(j->BeginRound(run, 0, 1).ok());
    RoundOutcome finished;
    finished.output_generation = 2;
    finished.labels_total = 1100;
    finished.test.accuracy = 0.8;
    finished.test.nll = 0.5;
    ASSERT_TRUE(j->FinishRound(run, 0, finished).ok());
    ASSERT_TRUE(j->BeginRound(run, 1, 2).ok());
    done_id = *j->BeginAttempt({run, 1, "a", 1, "cpu:0", 11, ""});
    ASSERT_TRUE(j->FinishAttempt(done_id, {AttemptStatus::kDone, "exit 0", "{}", "a.pt", ""}).ok());
    ASSERT_TRUE(j->BeginAttempt({run, 1, "b", 1, "cpu:1", 12, ""}).ok());
    // The controller dies here: round 1 begun, member a done, member b running.
  }
  auto j = MustOpen(path);
  ASSERT_NE(j, nullptr);
  auto run_rec = j->FindRun("fmnist");
  ASSERT_TRUE(run_rec.ok());
  auto last = j->LastRound(run_rec->id);
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  ASSERT_TRUE(last->has_value());
  EXPECT_EQ((*last)->round, 1);
  EXPECT_EQ((*last)->input_generation, 2u);
  EXPECT_EQ((*last)->status, RoundStatus::kTraining);
  EXPECT_FALSE((*last)->output_generation.has_value());
  EXPECT_FALSE((*last)->ended_at.has_value());
  auto attempts = j->AttemptsOfRound(run, 1);
  ASSERT_TRUE(attempts.ok());
  ASSERT_EQ(attempts->size(), 2u);
  EXPECT_EQ((*attempts)[0].id, done_id);
  EXPECT_EQ((*attempts)[0].status, AttemptStatus::kDone);
  EXPECT_EQ((*attempts)[0].checkpoint, std::optional<std::string>("a.pt"));
  EXPECT_EQ((*attempts)[1].member, "b");
  EXPECT_EQ((*attempts)[1].status, AttemptStatus::kRunning);

  // A run without rounds has no last round.
  int64_t other = *j->StartRun(SampleRun("fresh"));
  auto none = j->LastRound(other);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

TEST(JournalTest, SecondConnectionReadsWhileFirstWrites) {
  std::string path = ScratchDir() + "/run.db";
  auto writer = MustOpen(path);
  ASSERT_NE(writer, nullptr);
  int64_t run = *writer->StartRun(SampleRun());
  ASSERT_TRUE(writer->BeginRound(run, 0, 1).ok());
  int64_t attempt = *writer->BeginAttempt({run, 0, "a", 1, "cpu:0", 1, ""});

  auto reader = MustOpen(path);
  ASSERT_NE(reader, nullptr);

  // A reader is not blocked by an open write transaction and sees the last committed state.
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw,
                         "BEGIN IMMEDIATE; UPDATE rounds SET status = 'predicting'; "
                         "INSERT INTO epochs (attempt_id, epoch) VALUES (1, 100);",
                         nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(raw);
  auto seen = reader->LastRound(run);
  ASSERT_TRUE(seen.ok()) << seen.status().ToString();
  EXPECT_EQ((*seen)->status, RoundStatus::kTraining);
  EXPECT_TRUE(reader->EpochsOf(attempt)->empty());
  ASSERT_EQ(sqlite3_exec(raw, "ROLLBACK", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);

  // One thread writes batches while another reads through its own Journal.
  constexpr int kBatches = 50;
  constexpr int kBatch = 20;
  std::atomic<bool> done{false};
  std::thread w([&] {
    for (int b = 0; b < kBatches; b++) {
      std::vector<EpochRecord> rows;
      rows.reserve(kBatch);
      for (int i = 0; i < kBatch; i++) rows.push_back({b * kBatch + i, 1.0, {}, {}, 0.1, 0.5});
      Status s = writer->AddEpochs(attempt, rows);
      if (!s.ok()) {
        ADD_FAILURE() << s.ToString();
        break;
      }
    }
    done = true;
  });
  int reads = 0;
  while (!done) {
    auto e = reader->EpochsOf(attempt);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_EQ(e->size() % kBatch, 0u);  // whole batches only
    reads++;
  }
  w.join();
  EXPECT_GT(reads, 0);
  EXPECT_EQ(reader->EpochsOf(attempt)->size(), static_cast<std::size_t>(kBatches * kBatch));
}

TEST(JournalTest, RefusesNewerSchemaVersion) {
  std::string path = ScratchDir() + "/run.db";
  { ASSERT_NE(MustOpen(path), nullptr); }
  ASSERT_NO_FATAL_FAILURE(RawExec(path, "PRAGMA user_version = 99"));
  auto j = Journal::Open(path);
  ASSERT_FALSE(j.ok());
  EXPECT_TRUE(j.status().IsInvalidArgument()) << j.status().ToString();
  EXPECT_NE(j.status().message().find("schema version 99"), std::string::npos);
  EXPECT_NE(j.status().message().find("newer cohort"), std::string::npos);
  EXPECT_NE(j.status().message().find(path), std::string::npos);
}

TEST(JournalTest, RefusesForeignDatabase) {
  std::string path = ScratchDir() + "/run.db";
  ASSERT_NO_FATAL_FAILURE(RawExec(path, "CREATE TABLE t (x)"));
  auto j = Journal::Open(path);
  ASSERT_FALSE(j.ok());
  EXPECT_TRUE(j.status().IsInvalidArgument()) << j.status().ToString();
  EXPECT_NE(j.status().message().find("not a cohort journal"), std::string::npos);
}

TEST(JournalTest, DamagedFileGivesClearError) {
  std::string path = ScratchDir() + "/run.db";
  {
    std::ofstream f(path, std::ios::binary);
    std::string garbage(8192, '\0');
    for (std::size_t i = 0; i < garbage.size(); i++) garbage[i] = static_cast<char>(i * 131 + 7);
    f << garbage;
  }
  auto j = Journal::Open(path);
  ASSERT_FALSE(j.ok());
  EXPECT_TRUE(j.status().IsCorruption()) << j.status().ToString();
  EXPECT_NE(j.status().message().find(path), std::string::npos) << j.status().ToString();
  EXPECT_NE(j.status().message().find("not a database"), std::string::npos)
      << j.status().ToString();
  EXPECT_EQ(j.status().message().find('\n'), std::string::npos);

  auto missing = Journal::Open(ScratchDir() + "/no/such/dir/run.db");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no/such/dir/run.db"), std::string::npos)
      << missing.status().ToString();
}

TEST(JournalTest, AReaderCreatesAndWritesNothing) {
  std::string dir = ScratchDir();
  auto missing = Journal::Open(dir + "/run.db", {.read_only = true});
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(missing.status().IsNotFound()) << missing.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(dir + "/run.db"));
  // A 0-byte journal is refused as it is; a writer's open would have made a schema in it.
  std::ofstream(dir + "/run.db").close();
  auto empty = Journal::Open(dir + "/run.db", {.read_only = true});
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("empty file"), std::string::npos)
      << empty.status().ToString();
  EXPECT_EQ(std::filesystem::file_size(dir + "/run.db"), 0u);
  // A journal of another schema version is read by nobody but a writer, who upgrades it.
  std::filesystem::remove(dir + "/run.db");
  {
    auto j = MustOpen(dir + "/run.db");
    ASSERT_TRUE(j->StartRun(SampleRun()).ok());
  }
  auto reader = Journal::Open(dir + "/run.db", {.read_only = true});
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  auto run = (*reader)->FindRun("fmnist");
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_FALSE((*reader)->StartRun(SampleRun("other")).ok());
}

// A reader that opens while another process holds the whole file (a writer switching to WAL, or
// the checkpoint of a writer's last close) waits for it instead of failing "database is locked".
TEST(JournalTest, AReaderWaitsForALockHeldBriefly) {
  std::string path = ScratchDir() + "/run.db";
  {
    auto j = MustOpen(path);
    ASSERT_NE(j, nullptr);
    ASSERT_TRUE(j->StartRun(SampleRun()).ok());
  }
  sqlite3* holder = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &holder), SQLITE_OK);
  // In exclusive locking mode a WAL connection keeps its lock after the write, until it closes.
  ASSERT_EQ(sqlite3_exec(holder,
                         "PRAGMA locking_mode=EXCLUSIVE; BEGIN EXCLUSIVE; "
                         "UPDATE runs SET name = name; COMMIT;",
                         nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(holder);
  auto refused = Journal::Open(path, {.busy_timeout_ms = 0, .read_only = true});
  ASSERT_FALSE(refused.ok()) << "the lock is not held: the test proves nothing";
  EXPECT_NE(refused.status().message().find("locked"), std::string::npos)
      << refused.status().ToString();
  std::thread release([holder] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    sqlite3_close(holder);
  });
  auto reader = Journal::Open(path, {.read_only = true});
  release.join();
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_TRUE((*reader)->FindRun("fmnist").ok());
}
TEST(JournalTest, ADamagedPageIsFoundAtOpenAndTheMessageSaysWhatToDo) {
  std::string path = ScratchDir() + "/run.db";
  {
    auto j = MustOpen(path);
    auto id = j->StartRun(SampleRun());
    ASSERT_TRUE(id.ok());
    for (int r = 0; r < 200; ++r) ASSERT_TRUE(j->BeginRound(*id, r, r).ok());
  }
  // Every page after the first few gets garbage in its middle (the WAL is checkpointed into
  // the main file when the last connection closes).
  auto size = std::filesystem::file_size(path);
  ASSERT_GT(size, 4u * 4096);
  {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    for (uint64_t page = 2; page * 4096 < size; ++page) {
      f.seekp(static_cast<std::streamoff>(page * 4096 + 100));
      f << std::string(64, '\x5a');
    }
  }
  for (bool read_only : {false, true}) {
    auto j = Journal::Open(path, {.read_only = read_only});
    ASSERT_FALSE(j.ok()) << "read_only " << read_only;
    EXPECT_TRUE(j.status().IsCorruption()) << j.status().ToString();
    EXPECT_NE(j.status().message().find("A damaged journal"), std::string::npos)
        << j.status().ToString();
    EXPECT_EQ(j.status().message().find('\n'), std::string::npos);
  }
}

// The child opens its own connection, begins a transaction, writes enough to spill pages into
// the WAL, tells the parent, and waits to be killed.
TEST(JournalTest, ChildKilledInsideTransactionLeavesLastCommittedState) {
  std::string path = ScratchDir() + "/run.db";
  int64_t run = 0;
  int64_t attempt = 0;
  {
    auto j = MustOpen(path);
    ASSERT_NE(j, nullptr);
    run = *j->StartRun(SampleRun());
    ASSERT_TRUE(j->BeginRound(run, 0, 1).ok());
    attempt = *j->BeginAttempt({run, 0, "a", 1, "cpu:0", 1, ""});
    ASSERT_TRUE(j->AddEpochs(attempt, {{0, 1, {}, {}, 0, 0}, {1, 1, {}, {}, 0, 0}}).ok());
  }
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    auto j = Journal::Open(path);
    if (!j.ok()) _exit(2);
    // A committed write, then one left open.
    if (!(*j)->SetRoundPhase(run, 0, RoundStatus::kPredicting).ok()) _exit(3);
    sqlite3* raw = nullptr;
    if (sqlite3_open(path.c_str(), &raw) != SQLITE_OK) _exit(4);
    std::string sql =
        "PRAGMA cache_size = 2; BEGIN IMMEDIATE; UPDATE rounds SET status = 'acquiring'; "
        "WITH RECURSIVE n(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM n WHERE i < 20000) "
        "INSERT INTO epochs (attempt_id, epoch, train_loss) SELECT " +
        std::to_string(attempt) + ", i, randomblob(64) FROM n;";
    if (sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) _exit(5);
    char c = 'x';
    if (write(fds[1], &c, 1) != 1) _exit(6);
    pause();
    _exit(7);
  }
  close(fds[1]);
  char c = 0;
  ASSERT_EQ(read(fds[0], &c, 1), 1) << "the child failed before its transaction";
  close(fds[0]);
  // The uncommitted pages reached the WAL file.
  EXPECT_GT(std::filesystem::file_size(path + "-wal"), 64u * 1024u);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status));

  auto j = MustOpen(path);
  ASSERT_NE(j, nullptr);
  auto last = j->LastRound(run);
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_EQ((*last)->status, RoundStatus::kPredicting);  // the committed write, not the open one
  EXPECT_EQ(j->EpochsOf(attempt)->size(), 2u);
  EXPECT_EQ(QueryOne(path, "PRAGMA integrity_check"), "ok");
  // The dead writer's lock is gone: writing works at once.
  EXPECT_TRUE(j->SetRoundPhase(run, 0, RoundStatus::kAcquiring).ok());
}

// The child appends batches through the Journal until killed; every batch is all there or
// not at all.
TEST(JournalTest, ChildKilledDuringBatchedWritesKeepsWholeBatches) {
  std::string path = ScratchDir() + "/run.db";
  int64_t attempt = 0;
  {
    auto j = MustOpen(path);
    ASSERT_NE(j, nullptr);
    int64_t run = *j->StartRun(SampleRun());
    ASSERT_TRUE(j->BeginRound(run, 0, 1).ok());
    attempt = *j->BeginAttempt({run, 0, "a", 1, "cpu:0", 1, ""});
  }
  constexpr int kBatch = 25;
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    auto j = Journal::Open(path);
    if (!j.ok()) _exit(2);
    for (int b = 0;; b++) {
      std::vector<EpochRecord> rows;
      rows.reserve(kBatch);
      for (int i = 0; i < kBatch; i++) rows.push_back({b * kBatch + i, 1.0, 0.5, 0.5, 0.1, 1.0});
      if (!(*j)->AddEpochs(attempt, rows).ok()) _exit(3);
      if (b == 4) {
        char c = 'x';
        if (write(fds[1], &c, 1) != 1) _exit(4);
      }
    }
  }
  close(fds[1]);
  char c = 0;
  ASSERT_EQ(read(fds[0], &c, 1), 1) << "the child failed before its fifth batch";
  close(fds[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status);

  auto j = MustOpen(path);
  ASSERT_NE(j, nullptr);
  auto epochs = j->EpochsOf(attempt);
  ASSERT_TRUE(epochs.ok()) << epochs.status().ToString();
  EXPECT_GE(epochs->size(), 5u * kBatch);
  EXPECT_EQ(epochs->size() % kBatch, 0u);
  for (std::size_t i = 0; i < epochs->size(); i++) {
    ASSERT_EQ((*epochs)[i].epoch, static_cast<int64_t>(i));
  }
  EXPECT_EQ(QueryOne(path, "PRAGMA integrity_check"), "ok");
  EXPECT_TRUE(j->AddEpochs(attempt, {{100000, 1, {}, {}, 0, 0}}).ok());
}

}  // namespace
}  // namespace cohort::loop

namespace cohort::loop {
namespace {

// What version 6 added (the calibration columns), as SQL that takes them out again.
#define DROP_VERSION_6_COLUMNS                           \
  "ALTER TABLE rounds DROP COLUMN test_temperature; "    \
  "ALTER TABLE rounds DROP COLUMN test_nll_calibrated; " \
  "ALTER TABLE rounds DROP COLUMN test_ece_calibrated; "

// A journal at `path` with one run (id 1) and `rounds` begun rounds, the first holding an
// attempt of member "a" when `with_attempt`, turned back into an older schema by the SQL
// `downgrade` and reopened, which upgrades it to the current version. Null, with the test
// failed, if a step fails.
std::unique_ptr<Journal> ReopenDowngraded(const std::string& path, int rounds, bool with_attempt,
                                          const char* downgrade) {
  {
    auto j = MustOpen(path);
    if (j == nullptr) return nullptr;
    auto run = j->StartRun(SampleRun());
    EXPECT_TRUE(run.ok()) << run.status().ToString();
    if (!run.ok()) return nullptr;
    for (int round = 0; round < rounds; round++) {
      EXPECT_TRUE(j->BeginRound(*run, round, round + 1).ok());
    }
    if (with_attempt) {
      EXPECT_TRUE(j->BeginAttempt(AttemptStart{*run, 0, "a", 1, "cpu:0", 0, ""}).ok());
    }
  }
  RawExec(path, downgrade);
  if (::testing::Test::HasFailure()) return nullptr;
  auto j = MustOpen(path);
  EXPECT_EQ(QueryOne(path, "PRAGMA user_version"), std::to_string(kJournalSchemaVersion));
  return j;
}

// A version-1 journal (attempts could not be 'interrupted'; the controller's own stops were
// 'killed' told apart by their exit text) is upgraded in place when opened.
TEST(JournalTest, UpgradesSchemaVersion1) {
  const char* to_v1 = R"sql(
    PRAGMA foreign_keys = OFF;
    DROP TABLE attempts;
    CREATE TABLE attempts (
      id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL, round INTEGER NOT NULL,
      member TEXT NOT NULL, attempt INTEGER NOT NULL, device TEXT NOT NULL, pid INTEGER,
      status TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed', 'killed')),
      exit TEXT, started_at TEXT NOT NULL, ended_at TEXT,
      metrics_json TEXT CHECK (metrics_json IS NULL OR json_valid(metrics_json)),
      checkpoint TEXT, log_path TEXT,
      predictions_json TEXT CHECK (predictions_json IS NULL OR json_valid(predictions_json)),
      UNIQUE (run_id, round, member, attempt),
      FOREIGN KEY (run_id, round) REFERENCES rounds(run_id, round));
    INSERT INTO attempts (id, run_id, round, member, attempt, device, status, exit, started_at)
      VALUES (1, 1, 0, 'a', 1, 'cpu:0', 'killed', 'worker killed: no output (heartbeat)', 'x'),
             (2, 1, 0, 'a', 2, 'cpu:0', 'killed', 'interrupted (Ctrl-C)', 'x'),
             (3, 1, 0, 'b', 1, 'cpu:1', 'killed', 'the controller stopped during this attempt', 'x'),
             (4, 1, 0, 'c', 1, 'cpu:1', 'failed', 'worker exited with status 1', 'x');
    INSERT INTO epochs (attempt_id, epoch, train_loss) VALUES (1, 1, 0.5);
    ALTER TABLE rounds DROP COLUMN test_rmse;
    ALTER TABLE rounds DROP COLUMN test_mae;
    ALTER TABLE rounds DROP COLUMN test_calibration;
    ALTER TABLE rounds DROP COLUMN test_temperature;
    ALTER TABLE rounds DROP COLUMN test_nll_calibrated;
    ALTER TABLE rounds DROP COLUMN test_ece_calibrated;
    PRAGMA user_version = 1;
  )sql";
  auto j = ReopenDowngraded(ScratchDir() + "/run.db", /*rounds=*/1, /*with_attempt=*/false, to_v1);
  ASSERT_NE(j, nullptr);
  auto attempts = j->AttemptsOfRound(1, 0);
  ASSERT_TRUE(attempts.ok()) << attempts.status().ToString();
  std::map<std::string, AttemptStatus> status;
  for (const AttemptRecord& a : *attempts) status[a.member + std::to_string(a.attempt)] = a.status;
  EXPECT_EQ(status["a1"], AttemptStatus::kKilled);
  EXPECT_EQ(status["a2"], AttemptStatus::kInterrupted);
  EXPECT_EQ(status["b1"], AttemptStatus::kInterrupted);
  EXPECT_EQ(status["c1"], AttemptStatus::kFailed);
  EXPECT_EQ(j->EpochsOf(1)->size(), 1u);  // the epochs still point at their attempt
  // The new status can be written.
  AttemptStart start{1, 0, "d", 1, "cpu:0", 0, ""};
  int64_t id = *j->BeginAttempt(start);
  AttemptEnd end;
  end.status = AttemptStatus::kInterrupted;
  end.exit = "interrupted (Ctrl-C)";
  EXPECT_TRUE(j->FinishAttempt(id, end).ok());
  EXPECT_TRUE(j->SetAttemptPlacement(id, "node7", "2").ok());
}

// Version 2 journals get the placement columns.
TEST(JournalTest, UpgradesSchemaVersion2AndRecordsPlacement) {
  const char* to_v2 =
      "ALTER TABLE attempts DROP COLUMN node; ALTER TABLE attempts DROP COLUMN gpus; "
      "ALTER TABLE rounds DROP COLUMN test_rmse; ALTER TABLE rounds DROP COLUMN test_mae; "
      "ALTER TABLE rounds DROP COLUMN test_calibration; " DROP_VERSION_6_COLUMNS
      "PRAGMA user_version = 2;";
  auto j = ReopenDowngraded(ScratchDir() + "/run.db", 1, /*with_attempt=*/true, to_v2);
  ASSERT_NE(j, nullptr);
  auto before = j->AttemptsOfRound(1, 0);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  ASSERT_EQ(before->size(), 1u);
  EXPECT_FALSE((*before)[0].node.has_value());
  ASSERT_TRUE(j->SetAttemptPlacement((*before)[0].id, "gpu-node-3", "0,1").ok());
  auto after = *j->AttemptsOfRound(1, 0);
  EXPECT_EQ(after[0].node.value_or(""), "gpu-node-3");
  EXPECT_EQ(after[0].gpus.value_or(""), "0,1");
  EXPECT_FALSE(j->SetAttemptPlacement(999, "x", "").ok());
}

// Version 3 journals get the regression metric columns; a round's metrics of either kind of
// run read back as written.
TEST(JournalTest, UpgradesSchemaVersion3AndRecordsRegressionMetrics) {
  const char* to_v3 =
      "ALTER TABLE rounds DROP COLUMN test_rmse; ALTER TABLE rounds DROP COLUMN test_mae; "
      "ALTER TABLE rounds DROP COLUMN test_calibration; " DROP_VERSION_6_COLUMNS
      "PRAGMA user_version = 3;";
  auto j = ReopenDowngraded(ScratchDir() + "/run.db", 1, /*with_attempt=*/false, to_v3);
  ASSERT_NE(j, nullptr);
  RoundOutcome o;
  o.output_generation = 2;
  o.labels_total = 40;
  o.test.nll = 0.75;
  o.test.rmse = 0.5;
  o.test.mae = 0.25;
  o.test.calibration_error = 0.125;
  ASSERT_TRUE(j->FinishRound(1, 0, o).ok());
  auto rounds = j->RoundsOf(1);
  ASSERT_TRUE(rounds.ok()) << rounds.status().ToString();
  ASSERT_EQ(rounds->size(), 1u);
  const EnsembleTestMetrics& t = (*rounds)[0].test;
  EXPECT_FALSE(t.accuracy.has_value());
  EXPECT_EQ(t.nll.value_or(-1), 0.75);
  EXPECT_EQ(t.rmse.value_or(-1), 0.5);
  EXPECT_EQ(t.mae.value_or(-1), 0.25);
  EXPECT_EQ(t.calibration_error.value_or(-1), 0.125);
}

// Version 4 journals get the update_steps table; a step is recorded once (a resumed round's
// second record of the same step is ignored) and reads back in step order.
TEST(JournalTest, UpgradesSchemaVersion4AndRecordsUpdateSteps) {
  const char* to_v4 = "DROP TABLE update_steps; " DROP_VERSION_6_COLUMNS "PRAGMA user_version = 4;";
  auto j = ReopenDowngraded(ScratchDir() + "/run.db", 1, /*with_attempt=*/false, to_v4);
  ASSERT_NE(j, nullptr);
  UpdateStepRecord second{.step = 2,
                          .kind = "relabel_or_drop",
                          .name = "relabel_or_drop",
                          .summary = "no changes",
                          .counts_json = "{}",
                          .seconds = 0.5};
  UpdateStepRecord first{.step = 1,
                         .kind = "command",
                         .name = "fix.py",
                         .output_generation = 2,
                         .summary = "train: 3 removed",
                         .counts_json = R"({"train":{"removed":3}})",
                         .seconds = 1.5};
  ASSERT_TRUE(j->RecordUpdateStep(1, 0, second).ok());
  ASSERT_TRUE(j->RecordUpdateStep(1, 0, first).ok());
  UpdateStepRecord again = first;
  again.summary = "train: 3 removed (committed before the restart)";
  ASSERT_TRUE(j->RecordUpdateStep(1, 0, again).ok());
  auto steps = j->UpdateStepsOf(1, 0);
  ASSERT_TRUE(steps.ok()) << steps.status().ToString();
  ASSERT_EQ(steps->size(), 2u);
  EXPECT_EQ((*steps)[0].step, 1);
  EXPECT_EQ((*steps)[0].kind, "command");
  EXPECT_EQ((*steps)[0].output_generation.value_or(0), 2u);
  EXPECT_EQ((*steps)[0].summary, "train: 3 removed");
  EXPECT_EQ((*steps)[0].counts_json, R"({"train":{"removed":3}})");
  EXPECT_EQ((*steps)[0].seconds, 1.5);
  EXPECT_FALSE((*steps)[1].output_generation.has_value());
  EXPECT_EQ((*steps)[1].summary, "no changes");
  // Counts must be JSON; a step of a round the journal does not have is refused.
  UpdateStepRecord bad = first;
  bad.step = 3;
  bad.counts_json = "{train";
  EXPECT_FALSE(j->RecordUpdateStep(1, 0, bad).ok());
  EXPECT_FALSE(j->RecordUpdateStep(1, 7, first).ok());
}

// Version 5 journals get the calibration columns; a round's calibration reads back as written,
// and a round without one (a regression run) reads back without.
TEST(JournalTest, UpgradesSchemaVersion5AndRecordsCalibration) {
  auto j = ReopenDowngraded(ScratchDir() + "/run.db", /*rounds=*/2, /*with_attempt=*/false,
                            DROP_VERSION_6_COLUMNS "PRAGMA user_version = 5;");
  ASSERT_NE(j, nullptr);
  RoundOutcome o;
  o.output_generation = 2;
  o.test.accuracy = 0.875;
  o.test.nll = 0.5;
  o.test.ece = 0.0625;
  o.test.temperature = 0.9375;
  o.test.nll_calibrated = 0.4375;
  o.test.ece_calibrated = 0.03125;
  ASSERT_TRUE(j->FinishRound(1, 0, o).ok());
  RoundOutcome regression;
  regression.test.rmse = 0.5;
  ASSERT_TRUE(j->FinishRound(1, 1, regression).ok());
  auto rounds = j->RoundsOf(1);
  ASSERT_TRUE(rounds.ok()) << rounds.status().ToString();
  ASSERT_EQ(rounds->size(), 2u);
  const EnsembleTestMetrics& t = (*rounds)[0].test;
  EXPECT_EQ(t.temperature.value_or(-1), 0.9375);
  EXPECT_EQ(t.nll_calibrated.value_or(-1), 0.4375);
  EXPECT_EQ(t.ece_calibrated.value_or(-1), 0.03125);
  EXPECT_EQ(t.ece.value_or(-1), 0.0625);
  EXPECT_FALSE((*rounds)[1].test.temperature.has_value());
  EXPECT_FALSE((*rounds)[1].test.ece_calibrated.has_value());
}

}  // namespace
}  // namespace cohort::loop
