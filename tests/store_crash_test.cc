// Crash-safety tests of the store's writers (docs/store-format.md, "Durability and crash
// safety").
//
// StoreCrashTest runs a commit (Append + Remove + Move, or a compaction), InitStore and
// CloneStore through a FaultInjectionEnv that stops the operation after n steps, for every
// n in turn until a run completes, and checks the two things a crash can leave: what a
// process crash leaves (everything written stays) and what a power loss leaves (only what
// was synced stays). Either way the store must verify, be at the old or the new generation
// and hold exactly that generation's data; the next writer must clean every leftover away
// and be able to commit. The same sweep is run with an I/O error at every step instead of a
// crash, and a few error paths are checked by name.
//
// StoreCrashKillTest runs store_crash_child, a real writer process, and kills it with
// SIGKILL at random moments, then checks what survived against a reference store built by
// uninterrupted runs of the same program.
//
// Environment: COHORT_TEST_TMP names the directory for scratch stores (ctest sets it);
// COHORT_STORE_CRASH_SEED and COHORT_STORE_CRASH_TRIALS change the kill test's seed and trial
// count (loop_e2e's COHORT_CRASH_TRIALS, which scripts/sanitize lowers, is not read here).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "child_process.h"
#include "common/status.h"
#include "store/env.h"
#include "store/fault_env.h"
#include "store/host_array.h"
#include "store/manifest.h"
#include "store/schema.h"
#include "store/snapshot.h"
#include "store/store.h"
#include "store/test_util.h"
#include "store/transaction.h"

#ifndef STORE_CRASH_CHILD_PATH
#error "STORE_CRASH_CHILD_PATH must name the store_crash_child executable"
#endif

namespace cohort::store {
namespace {

using ::cohort::testing::ChildProcess;

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------
// Reading a generation whole, and comparing two.

struct TableData {
  TableSchema schema;
  std::vector<uint64_t> ids;
  std::vector<std::byte> features;
  std::vector<std::byte> labels;
};

struct GenerationData {
  uint64_t next_segment = 0;
  uint64_t next_sample_id = 0;
  std::map<std::string, TableData> tables;
};

Result<GenerationData> ReadGeneration(const std::string& dir, uint64_t generation) {
  COHORT_ASSIGN_OR_RETURN(auto snapshot, Snapshot::Open(dir, generation));
  GenerationData data;
  data.next_segment = snapshot->manifest().next_segment;
  data.next_sample_id = snapshot->manifest().next_sample_id;
  for (const auto& name : snapshot->table_names()) {
    COHORT_ASSIGN_OR_RETURN(const Table* table, snapshot->table(name));
    TableData& t = data.tables[name];
    t.schema = table->schema();
    t.ids = table->Ids();
    t.features = table->ReadFeatures().data;
    t.labels = table->ReadLabels().data;
  }
  return data;
}

template <typename T>
std::string FirstDifference(const std::vector<T>& want, const std::vector<T>& got) {
  if (want.size() != got.size()) {
    return std::to_string(got.size()) + " elements, expected " + std::to_string(want.size());
  }
  auto [w, g] = std::mismatch(want.begin(), want.end(), got.begin());
  if (w == want.end()) return "";
  return "first difference at element " + std::to_string(w - want.begin());
}

// "" when equal; otherwise what differs first, for failure messages.
std::string DescribeDifference(const GenerationData& want, const GenerationData& got) {
  std::ostringstream out;
  if (want.next_segment != got.next_segment) {
    out << "next_segment " << got.next_segment << ", expected " << want.next_segment << "; ";
  }
  if (want.next_sample_id != got.next_sample_id) {
    out << "next_sample_id " << got.next_sample_id << ", expected " << want.next_sample_id << "; ";
  }
  std::set<std::string> names;
  for (const auto& [name, t] : want.tables) names.insert(name);
  for (const auto& [name, t] : got.tables) names.insert(name);
  for (const auto& name : names) {
    auto w = want.tables.find(name);
    auto g = got.tables.find(name);
    if (w == want.tables.end() || g == got.tables.end()) {
      out << "table " << name << (w == want.tables.end() ? " unexpected" : " missing") << "; ";
      continue;
    }
    if (!(w->second.schema == g->second.schema)) {
      out << "table " << name << ": schema " << g->second.schema.ToString() << ", expected "
          << w->second.schema.ToString() << "; ";
    }
    std::string ids = FirstDifference(w->second.ids, g->second.ids);
    std::string features = FirstDifference(w->second.features, g->second.features);
    std::string labels = FirstDifference(w->second.labels, g->second.labels);
    if (!ids.empty()) out << "table " << name << " ids: " << ids << "; ";
    if (!features.empty()) out << "table " << name << " feature bytes: " << features << "; ";
    if (!labels.empty()) out << "table " << name << " label bytes: " << labels << "; ";
  }
  return out.str();
}

// ---------------------------------------------------------------------------------------
// Store helpers.

TableSchema SmallSchema() {
  TableSchema schema;
  schema.feature_dtype = Dtype::kUint8;
  schema.feature_shape = {4, 3};
  schema.label_kind = LabelKind::kClass;
  return schema;
}

// `rows` samples of SmallSchema whose bytes and labels depend on `seed`.
std::pair<HostArray, HostArray> SmallSamples(uint64_t rows, uint64_t seed) {
  HostArray features(Dtype::kUint8, {rows, 4, 3});
  HostArray labels(Dtype::kInt64, {rows});
  for (uint64_t i = 0; i < features.data.size(); i++) {
    features.as<uint8_t>()[i] = static_cast<uint8_t>(seed * 37 + i * 11);
  }
  for (uint64_t i = 0; i < rows; i++)
    labels.as<int64_t>()[i] = static_cast<int64_t>((seed + i) % 7);
  return {std::move(features), std::move(labels)};
}

Status AppendSmall(Transaction& txn, const std::string& table, uint64_t rows, uint64_t seed) {
  auto [features, labels] = SmallSamples(rows, seed);
  return txn.Append(table, features, &labels).status();
}

// A FaultInjectionEnv that injects nothing and skips fsync: for the writes a test makes
// around the operation under test, where durability does not matter.
class NoSyncEnv {
 public:
  NoSyncEnv() { env_.set_real_sync(false); }
  Env* get() { return &env_; }

 private:
  FaultInjectionEnv env_;
};

// Files in `dir` that are none of LOCK, CURRENT, a manifest at or below CURRENT, or a file
// some such manifest names.
Result<std::vector<std::string>> StrayFiles(const std::string& dir) {
  COHORT_ASSIGN_OR_RETURN(uint64_t current, ReadCurrent(Env::Default(), dir));
  COHORT_ASSIGN_OR_RETURN(auto history, ReadHistory(dir));
  std::set<std::string> named;
  for (const auto& manifest : history) {
    for (const auto& file : manifest.Files()) named.insert(file.file);
  }
  COHORT_ASSIGN_OR_RETURN(auto names, Env::Default()->ListDir(dir));
  std::vector<std::string> strays;
  for (const auto& name : names) {
    if (name == "LOCK" || name == "CURRENT" || named.count(name) > 0) continue;
    if (auto generation = ParseManifestFileName(name); generation && *generation <= current) {
      continue;
    }
    strays.push_back(name);
  }
  std::sort(strays.begin(), strays.end());
  return strays;
}

std::string Join(const std::vector<std::string>& lines, const char* separator = "\n  ") {
  std::string out;
  for (const auto& line : lines) out += (out.empty() ? "" : separator) + line;
  return out;
}

void ExpectVerifies(const std::string& dir) {
  auto report = VerifyStore(dir);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->ok()) << "VerifyStore(" << dir << "):\n  " << Join(report->problems);
}

void ReplaceDirWithCopy(const std::string& from, const std::string& to) {
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
}

// The next writer after a crash: Begin must clean away every leftover, a commit must work,
// and the generation the crash left must read the same afterwards.
void ExpectNextWriterRecovers(const std::string& dir, uint64_t current) {
  auto before = ReadGeneration(dir, current);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  NoSyncEnv env;
  {
    auto txn = Transaction::Begin(dir, env.get());
    ASSERT_TRUE(txn.ok()) << txn.status().ToString();
    auto strays = StrayFiles(dir);
    ASSERT_TRUE(strays.ok()) << strays.status().ToString();
    EXPECT_TRUE(strays->empty()) << "left after Transaction::Begin cleaned up:\n  "
                                 << Join(*strays);
    if (!(*txn)->HasTable("train")) {
      ASSERT_TRUE((*txn)->CreateTable("train", SmallSchema()).ok());
    }
    ASSERT_TRUE(AppendSmall(**txn, "train", 2, 99).ok());
    auto committed = (*txn)->Commit("after the crash");
    ASSERT_TRUE(committed.ok()) << committed.status().ToString();
    EXPECT_EQ(*committed, current + 1);
  }
  ExpectVerifies(dir);
  auto strays = StrayFiles(dir);
  ASSERT_TRUE(strays.ok()) << strays.status().ToString();
  EXPECT_TRUE(strays->empty()) << "left after a commit:\n  " << Join(*strays);
  auto after = ReadGeneration(dir, current);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(DescribeDifference(*before, *after), "") << "generation " << current;
}

// The generations an interrupted operation may leave, with what each must hold.
using ExpectedGenerations = std::map<uint64_t, GenerationData>;

// Checks a store dir after an interrupted operation; returns the generation it is at, or
// nullopt when it is no store (allowed only if `may_leave_no_store`).
std::optional<uint64_t> CheckRecoveredStore(const std::string& dir,
                                            const ExpectedGenerations& expected,
                                            bool may_leave_no_store) {
  auto current = ReadCurrent(Env::Default(), dir);
  if (!current.ok()) {
    EXPECT_TRUE(may_leave_no_store && current.status().IsNotFound()) << current.status().ToString();
    return std::nullopt;
  }
  ExpectVerifies(dir);
  auto want = expected.find(*current);
  if (want == expected.end()) {
    ADD_FAILURE() << "CURRENT names generation " << *current << ", which is not one of those "
                  << "the operation may leave";
    return *current;
  }
  auto got = ReadGeneration(dir, *current);
  if (!got.ok()) {
    ADD_FAILURE() << got.status().ToString();
    return *current;
  }
  EXPECT_EQ(DescribeDifference(want->second, *got), "") << "generation " << *current;
  ExpectNextWriterRecovers(dir, *current);
  return *current;
}

// ---------------------------------------------------------------------------------------
// The fixture: a scratch directory per test, removed when the test passes.

class StoreCrashFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::cohort::store::testing::ScratchDir();
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }
  std::string Path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  std::string dir_;
};

// ---------------------------------------------------------------------------------------
// Sweeps: the operation is stopped at every step in turn.

enum class Fault { kCrash, kIOError };

struct SweepSpec {
  std::string work_dir;
  std::function<void()> prepare;          // puts work_dir in its starting state
  std::function<Status(Env*)> operation;  // the operation under test, on work_dir
  ExpectedGenerations expected;           // every generation it may leave, oldest first
  bool may_leave_no_store = false;        // InitStore and CloneStore
};

struct SweepResult {
  uint64_t full_steps = 0;  // steps of the run that was not interrupted
  uint64_t interrupted_runs = 0;
  std::vector<FaultSite> full_run;                        // the steps of that run, in order
  std::set<std::optional<uint64_t>> after_process_crash;  // outcomes seen
  std::set<std::optional<uint64_t>> after_power_loss;
};

// Index of the step renaming CURRENT.tmp over CURRENT in `steps`, or steps.size().
size_t CurrentRenameStep(const std::vector<FaultSite>& steps) {
  for (size_t i = 0; i < steps.size(); i++) {
    if (steps[i].op == FaultOp::kRenameFile && steps[i].target_base_name() == "CURRENT") {
      return i;
    }
  }
  return steps.size();
}

std::string Describe(const FaultSite& site) {
  return std::string(FaultOpName(site.op)) + " " + site.base_name() +
         (site.target.empty() ? "" : " -> " + site.target_base_name());
}

// Runs spec.operation once with a crash (or an I/O error) at step n+1, for n = 0, 1, ...,
// until a run is not interrupted. After each run checks the process-crash view (on a copy)
// and then, after DropUnsyncedData, the power-loss view.
SweepResult SweepFaults(const SweepSpec& spec, Fault fault) {
  SweepResult result;
  const uint64_t old_generation = spec.expected.begin()->first;
  const uint64_t new_generation = spec.expected.rbegin()->first;
  const std::string process_view_dir = spec.work_dir + ".process-crash";
  for (uint64_t n = 0;; n++) {
    if (::testing::Test::HasFatalFailure()) {
      ADD_FAILURE() << "sweep stopped at n = " << n << " after a fatal failure";
      break;
    }
    if (n > 10000) {
      ADD_FAILURE() << "no run completed within 10000 steps";
      break;
    }
    spec.prepare();
    FaultInjectionEnv env;
    env.set_real_sync(false);
    std::vector<FaultSite> steps;
    std::optional<FaultSite> failed_step;
    env.SetIOErrorPredicate([&](const FaultSite& site) {
      steps.push_back(site);
      if (fault == Fault::kIOError && steps.size() == n + 1) {
        failed_step = site;
        return true;
      }
      return false;
    });
    if (fault == Fault::kCrash) env.SetCrashAfter(n);
    Status status = spec.operation(&env);
    const bool interrupted = fault == Fault::kCrash ? env.crashed() : failed_step.has_value();
    SCOPED_TRACE((fault == Fault::kCrash
                      ? "crash after " + std::to_string(n) + " steps: "
                      : "I/O error at step " + std::to_string(n + 1) + " (" +
                            (failed_step ? Describe(*failed_step) : "none") + "): ") +
                 status.ToString());
    if (interrupted) {
      result.interrupted_runs++;
      EXPECT_FALSE(status.ok());
      EXPECT_EQ(status.code(),
                fault == Fault::kCrash ? Status::Code::kAborted : Status::Code::kIOError);
    } else {
      EXPECT_TRUE(status.ok());
      result.full_steps = steps.size();
      result.full_run = steps;
    }

    ReplaceDirWithCopy(spec.work_dir, process_view_dir);
    std::optional<uint64_t> process_outcome;
    {
      SCOPED_TRACE("process crash view");
      process_outcome =
          CheckRecoveredStore(process_view_dir, spec.expected, spec.may_leave_no_store);
    }
    result.after_process_crash.insert(process_outcome);

    Status dropped = env.DropUnsyncedData();
    EXPECT_TRUE(dropped.ok()) << dropped.ToString();
    std::optional<uint64_t> power_outcome;
    {
      SCOPED_TRACE("power loss view");
      power_outcome = CheckRecoveredStore(spec.work_dir, spec.expected, spec.may_leave_no_store);
    }
    result.after_power_loss.insert(power_outcome);

    if (interrupted) {
      // Up to the rename of CURRENT (step n is the one that crashed or failed), the old state
      // stays (no store at all for InitStore and CloneStore); after it, a process crash leaves
      // the new generation. A power loss before the operation completed leaves the old state.
      const std::optional<uint64_t> old_outcome =
          spec.may_leave_no_store ? std::nullopt : std::optional<uint64_t>(old_generation);
      const bool renamed = n > CurrentRenameStep(steps);
      EXPECT_EQ(process_outcome, renamed ? std::optional<uint64_t>(new_generation) : old_outcome);
      EXPECT_EQ(power_outcome, old_outcome);
    }
    if (!interrupted) {
      // A completed operation is durable.
      EXPECT_EQ(process_outcome, std::optional<uint64_t>(new_generation));
      EXPECT_EQ(power_outcome, std::optional<uint64_t>(new_generation));
      break;
    }
  }
  fs::remove_all(process_view_dir);
  return result;
}

void PrintSweep(const std::string& what, const SweepResult& result) {
  std::cout << what << ": " << result.full_steps << " steps, " << result.interrupted_runs
            << " interrupted runs checked\n";
}

// A store with tables pool (15 live of 20 rows) and train (4 live of 5) at generation 2.
void BuildBaseStore(const std::string& dir) {
  NoSyncEnv env;
  ASSERT_TRUE(InitStore(dir, env.get()).ok());
  {
    auto txn = Transaction::Begin(dir, env.get());
    ASSERT_TRUE(txn.ok()) << txn.status().ToString();
    ASSERT_TRUE((*txn)->CreateTable("pool", SmallSchema()).ok());
    ASSERT_TRUE((*txn)->CreateTable("train", SmallSchema()).ok());
    ASSERT_TRUE(AppendSmall(**txn, "pool", 20, 1).ok());
    ASSERT_TRUE(AppendSmall(**txn, "train", 5, 2).ok());
    auto committed = (*txn)->Commit("base: tables");
    ASSERT_TRUE(committed.ok()) << committed.status().ToString();
  }
  {
    auto txn = Transaction::Begin(dir, env.get());
    ASSERT_TRUE(txn.ok()) << txn.status().ToString();
    auto pool = (*txn)->TableIds("pool");
    auto train = (*txn)->TableIds("train");
    ASSERT_TRUE(pool.ok() && train.ok());
    std::vector<uint64_t> dropped;
    for (size_t i = 0; i < pool->size(); i += 4) dropped.push_back((*pool)[i]);
    ASSERT_TRUE((*txn)->Remove("pool", dropped).ok());
    ASSERT_TRUE((*txn)->Remove("train", std::vector<uint64_t>{(*train)[1]}).ok());
    auto committed = (*txn)->Commit("base: removals");
    ASSERT_TRUE(committed.ok()) << committed.status().ToString();
    ASSERT_EQ(*committed, 2u);
  }
}

// The transaction whose commit the tests interrupt: Append + Remove + Move (pool -> train).
Status AppendRemoveMove(const std::string& dir, Env* env) {
  COHORT_ASSIGN_OR_RETURN(auto txn, Transaction::Begin(dir, env));
  COHORT_RETURN_IF_ERROR(AppendSmall(*txn, "pool", 6, 7));
  COHORT_ASSIGN_OR_RETURN(auto ids, txn->TableIds("pool"));
  COHORT_RETURN_IF_ERROR(txn->Remove("pool", std::vector<uint64_t>{ids[0], ids[3]}));
  COHORT_RETURN_IF_ERROR(
      txn->Move("pool", "train", std::vector<uint64_t>{ids[1], ids[2], ids.back()}));
  return txn->Commit("append, remove, move").status();
}

Status CompactCommit(const std::string& dir, Env* env) {
  COHORT_ASSIGN_OR_RETURN(auto txn, Transaction::Begin(dir, env));
  COHORT_ASSIGN_OR_RETURN(auto compacted, txn->Compact(0.1));
  if (compacted.empty()) return Status::InvalidArgument("nothing was compacted");
  return txn->Commit("compact").status();
}

class StoreCrashTest : public StoreCrashFixture {
 protected:
  void SetUp() override {
    StoreCrashFixture::SetUp();
    base_ = Path("base");
    BuildBaseStore(base_);
  }

  // The spec for a commit on a fresh copy of the base store.
  SweepSpec CommitSpec(const std::function<Status(const std::string&, Env*)>& commit) {
    SweepSpec spec;
    spec.work_dir = Path("work");
    spec.prepare = [this, work = spec.work_dir] { ReplaceDirWithCopy(base_, work); };
    spec.operation = [commit, work = spec.work_dir](Env* env) { return commit(work, env); };
    std::string reference = Path("reference");
    ReplaceDirWithCopy(base_, reference);
    NoSyncEnv env;
    Status done = commit(reference, env.get());
    EXPECT_TRUE(done.ok()) << done.ToString();
    for (uint64_t generation : {2u, 3u}) {
      auto data = ReadGeneration(reference, generation);
      EXPECT_TRUE(data.ok()) << data.status().ToString();
      if (data.ok()) spec.expected[generation] = std::move(*data);
    }
    return spec;
  }

  // InitStore into an empty directory that exists (durably) beforehand: the sweep is about
  // the store's own files (see InitStoreIntoANewDirectorySurvivesPowerLoss).
  SweepSpec InitSpec() {
    SweepSpec spec;
    spec.work_dir = Path("work");
    spec.prepare = [work = spec.work_dir] {
      fs::remove_all(work);
      fs::create_directories(work);
    };
    spec.operation = [work = spec.work_dir](Env* env) { return InitStore(work, env); };
    spec.may_leave_no_store = true;
    std::string reference = Path("reference");
    Status created = InitStore(reference);
    EXPECT_TRUE(created.ok()) << created.ToString();
    auto empty = ReadGeneration(reference, 0);
    EXPECT_TRUE(empty.ok()) << empty.status().ToString();
    if (empty.ok()) spec.expected[0] = std::move(*empty);
    return spec;
  }

  // CloneStore of the base store's generation 2 into an empty directory, as above.
  SweepSpec CloneSpec() {
    SweepSpec spec;
    spec.work_dir = Path("clone");
    spec.prepare = [work = spec.work_dir] {
      fs::remove_all(work);
      fs::create_directories(work);
    };
    spec.operation = [this, work = spec.work_dir](Env* env) {
      return CloneStore(base_, work, std::nullopt, env).status();
    };
    spec.may_leave_no_store = true;
    auto source = ReadGeneration(base_, 2);
    EXPECT_TRUE(source.ok()) << source.status().ToString();
    if (source.ok()) spec.expected[2] = std::move(*source);
    return spec;
  }

  // A clone never writes to its source.
  void ExpectBaseUnchanged(const GenerationData& before) {
    ExpectVerifies(base_);
    auto after = ReadGeneration(base_, 2);
    ASSERT_TRUE(after.ok()) << after.status().ToString();
    EXPECT_EQ(DescribeDifference(before, *after), "");
  }

  std::string base_;
};

TEST_F(StoreCrashTest, CrashAtEveryStepOfACommit) {
  SweepSpec spec = CommitSpec(AppendRemoveMove);
  ASSERT_EQ(spec.expected.size(), 2u);
  SweepResult result = SweepFaults(spec, Fault::kCrash);
  PrintSweep("Append + Remove + Move + Commit", result);
  EXPECT_EQ(result.interrupted_runs, result.full_steps);
  // Before the rename of CURRENT a crash leaves generation 2; after it, a process crash
  // leaves 3; a power loss leaves 2 until the directory sync that ends the commit.
  const std::set<std::optional<uint64_t>> both{2, 3};
  EXPECT_EQ(result.after_process_crash, both);
  EXPECT_EQ(result.after_power_loss, both);
  std::vector<std::string> steps;
  for (const auto& site : result.full_run) steps.push_back(Describe(site));
  std::cout << "steps:\n  " << Join(steps) << "\n";
}

TEST_F(StoreCrashTest, CrashAtEveryStepOfACompaction) {
  SweepSpec spec = CommitSpec(CompactCommit);
  ASSERT_EQ(spec.expected.size(), 2u);
  SweepResult result = SweepFaults(spec, Fault::kCrash);
  PrintSweep("Compact + Commit", result);
  const std::set<std::optional<uint64_t>> both{2, 3};
  EXPECT_EQ(result.after_process_crash, both);
  EXPECT_EQ(result.after_power_loss, both);
}

TEST_F(StoreCrashTest, CrashAtEveryStepOfInitStore) {
  SweepSpec spec = InitSpec();
  SweepResult result = SweepFaults(spec, Fault::kCrash);
  PrintSweep("InitStore", result);
  const std::set<std::optional<uint64_t>> both{std::nullopt, 0};
  EXPECT_EQ(result.after_process_crash, both);
  EXPECT_EQ(result.after_power_loss, both);
}

TEST_F(StoreCrashTest, CrashAtEveryStepOfCloneStore) {
  SweepSpec spec = CloneSpec();
  SweepResult result = SweepFaults(spec, Fault::kCrash);
  PrintSweep("CloneStore", result);
  const std::set<std::optional<uint64_t>> both{std::nullopt, 2};
  EXPECT_EQ(result.after_process_crash, both);
  EXPECT_EQ(result.after_power_loss, both);
  ExpectBaseUnchanged(spec.expected.at(2));
}

TEST_F(StoreCrashTest, IOErrorAtEveryStepOfACommit) {
  SweepSpec spec = CommitSpec(AppendRemoveMove);
  SweepResult result = SweepFaults(spec, Fault::kIOError);
  PrintSweep("Append + Remove + Move + Commit with an I/O error", result);
  EXPECT_EQ(result.interrupted_runs, result.full_steps);
}

TEST_F(StoreCrashTest, IOErrorAtEveryStepOfACompaction) {
  SweepSpec spec = CommitSpec(CompactCommit);
  SweepResult result = SweepFaults(spec, Fault::kIOError);
  PrintSweep("Compact + Commit with an I/O error", result);
  EXPECT_EQ(result.interrupted_runs, result.full_steps);
}

TEST_F(StoreCrashTest, IOErrorAtEveryStepOfInitStore) {
  SweepSpec spec = InitSpec();
  SweepResult result = SweepFaults(spec, Fault::kIOError);
  PrintSweep("InitStore with an I/O error", result);
  EXPECT_EQ(result.interrupted_runs, result.full_steps);
}

TEST_F(StoreCrashTest, IOErrorAtEveryStepOfCloneStore) {
  SweepSpec spec = CloneSpec();
  SweepResult result = SweepFaults(spec, Fault::kIOError);
  PrintSweep("CloneStore with an I/O error", result);
  EXPECT_EQ(result.interrupted_runs, result.full_steps);
  ExpectBaseUnchanged(spec.expected.at(2));
}

// Runs the Append + Remove + Move commit on a copy of the base store with `env`, expects it
// to fail, and checks that the store stays at generation 2, also after a power loss.
void ExpectFailedCommitKeepsOldGeneration(const std::string& base, const std::string& work,
                                          FaultInjectionEnv* env) {
  ReplaceDirWithCopy(base, work);
  auto old_data = ReadGeneration(base, 2);
  ASSERT_TRUE(old_data.ok());
  Status status = AppendRemoveMove(work, env);
  EXPECT_EQ(status.code(), Status::Code::kIOError) << status.ToString();
  EXPECT_EQ(env->injected_io_errors(), 1u);
  ExpectedGenerations expected{{2, *old_data}};
  {
    SCOPED_TRACE("right after the failed commit");
    auto current = ReadCurrent(Env::Default(), work);
    ASSERT_TRUE(current.ok());
    EXPECT_EQ(*current, 2u);
    ExpectVerifies(work);
    auto data = ReadGeneration(work, 2);
    ASSERT_TRUE(data.ok());
    EXPECT_EQ(DescribeDifference(*old_data, *data), "");
  }
  env->ClearIOErrors();
  ASSERT_TRUE(env->DropUnsyncedData().ok());
  SCOPED_TRACE("after a power loss");
  EXPECT_EQ(CheckRecoveredStore(work, expected, false), std::optional<uint64_t>(2));
}

TEST_F(StoreCrashTest, FailedFsyncOfTheManifestFailsTheCommit) {
  FaultInjectionEnv env;
  env.set_real_sync(false);
  env.FailSyncOn(ManifestFileName(3) + ".tmp");
  ExpectFailedCommitKeepsOldGeneration(base_, Path("work"), &env);
}

TEST_F(StoreCrashTest, FailedFsyncOfCurrentTmpFailsTheCommit) {
  FaultInjectionEnv env;
  env.set_real_sync(false);
  env.FailSyncOn("CURRENT.tmp");
  ExpectFailedCommitKeepsOldGeneration(base_, Path("work"), &env);
}

TEST_F(StoreCrashTest, FailedDirectorySyncBeforeCurrentFailsTheCommit) {
  FaultInjectionEnv env;
  env.set_real_sync(false);
  env.SetIOErrorPredicate([](const FaultSite& site) { return site.op == FaultOp::kSyncDir; });
  ExpectFailedCommitKeepsOldGeneration(base_, Path("work"), &env);
}

TEST_F(StoreCrashTest, FailedRenameOfCurrentFailsTheCommit) {
  FaultInjectionEnv env;
  env.set_real_sync(false);
  env.SetIOErrorPredicate([](const FaultSite& site) {
    return site.op == FaultOp::kRenameFile && site.base_name() == "CURRENT.tmp";
  });
  ExpectFailedCommitKeepsOldGeneration(base_, Path("work"), &env);
}

// The last step of a commit, the directory sync after the rename of CURRENT, fails: the
// commit reports the error, but CURRENT already names the new generation until a power loss
// undoes the rename. Either way the store is consistent.
TEST_F(StoreCrashTest, FailedFinalDirectorySyncLeavesAConsistentStore) {
  std::string work = Path("work");
  ReplaceDirWithCopy(base_, work);
  FaultInjectionEnv env;
  env.set_real_sync(false);
  bool renamed_current = false;
  env.SetIOErrorPredicate([&](const FaultSite& site) {
    if (site.op == FaultOp::kRenameFile && site.base_name() == "CURRENT.tmp") {
      renamed_current = true;
    }
    return renamed_current && site.op == FaultOp::kSyncDir;
  });
  Status status = AppendRemoveMove(work, &env);
  EXPECT_EQ(status.code(), Status::Code::kIOError) << status.ToString();
  auto current = ReadCurrent(Env::Default(), work);
  ASSERT_TRUE(current.ok());
  EXPECT_EQ(*current, 3u);
  ExpectVerifies(work);
  env.ClearIOErrors();
  ASSERT_TRUE(env.DropUnsyncedData().ok());
  current = ReadCurrent(Env::Default(), work);
  ASSERT_TRUE(current.ok());
  EXPECT_EQ(*current, 2u);
  ExpectVerifies(work);
}

// InitStore into a directory it creates: after it returns OK, a power loss must not lose
// the store. The directory's entry in its parent is never fsync'd (InitStore, like
// CloneStore, syncs only the store directory), so this fails today; see the report that
// came with this test. Enable once PrepareEmptyDir syncs the parent after CreateDir.
TEST_F(StoreCrashTest, InitStoreIntoANewDirectorySurvivesPowerLoss) {
  std::string store = Path("new-store");
  FaultInjectionEnv env;
  env.set_real_sync(false);
  ASSERT_TRUE(InitStore(store, &env).ok());
  ASSERT_TRUE(env.DropUnsyncedData().ok());
  auto current = ReadCurrent(Env::Default(), store);
  EXPECT_TRUE(current.ok()) << current.status().ToString();
}

// InitStore (CloneStore alike) stopped by a crash or an error leaves a directory that is no
// store yet holds its LOCK (and maybe gen-000000.json or the clone's linked files). Trying
// again must work; today it is refused as "not empty; a store needs a directory of its own"
// and the user has to empty the directory by hand. See the report that came with this test.
TEST_F(StoreCrashTest, InterruptedInitStoreCanBeRetried) {
  std::string store = Path("store");
  fs::create_directories(store);
  FaultInjectionEnv env;
  env.set_real_sync(false);
  env.FailSyncOn("CURRENT.tmp");
  ASSERT_FALSE(InitStore(store, &env).ok());
  ASSERT_TRUE(ReadCurrent(Env::Default(), store).status().IsNotFound());
  Status retried = InitStore(store);
  EXPECT_TRUE(retried.ok()) << retried.ToString();
}

// A committed generation leaves no file behind that no manifest names. Appending to a table
// and compacting it in the same transaction writes a segment that the compaction makes
// unreferenced before the commit (so does moving samples in and removing them again): the
// commit keeps the file, and as its number is below next_segment no later writer's
// CleanUpLeftovers removes it either. This fails today; see the report that came with this
// test. Enable once such files are removed.
TEST_F(StoreCrashTest, CommitLeavesNoUnreferencedSegments) {
  std::string work = Path("work");
  ReplaceDirWithCopy(base_, work);
  {
    auto txn = Transaction::Begin(work);
    ASSERT_TRUE(txn.ok()) << txn.status().ToString();
    ASSERT_TRUE(AppendSmall(**txn, "pool", 3, 5).ok());
    auto compacted = (*txn)->Compact(0.1);
    ASSERT_TRUE(compacted.ok()) << compacted.status().ToString();
    ASSERT_NE(std::find(compacted->begin(), compacted->end(), "pool"), compacted->end());
    auto committed = (*txn)->Commit("append and compact");
    ASSERT_TRUE(committed.ok()) << committed.status().ToString();
  }
  auto txn = Transaction::Begin(work);
  ASSERT_TRUE(txn.ok()) << txn.status().ToString();
  auto strays = StrayFiles(work);
  ASSERT_TRUE(strays.ok()) << strays.status().ToString();
  EXPECT_TRUE(strays->empty()) << "named by no manifest:\n  " << Join(*strays);
}

// ---------------------------------------------------------------------------------------
// A real writer process killed with SIGKILL.

// The generations a child's output reports committed, in order; nullopt if a line is not
// "committed N".
std::optional<std::vector<uint64_t>> CommittedGenerations(const std::string& output) {
  std::vector<uint64_t> out;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    if (lines.eof()) break;  // a line cut short by the kill; never flushed that way
    std::istringstream words(line);
    std::string word;
    uint64_t generation = 0;
    if (!(words >> word >> generation) || word != "committed") return std::nullopt;
    out.push_back(generation);
  }
  return out;
}

std::string ChildPath() { return STORE_CRASH_CHILD_PATH; }

// Runs the child to its end: `count` generations on `store` from `start`.
void RunChildToEnd(const std::string& store, uint64_t start, uint64_t count, bool no_sync) {
  std::vector<std::string> args{ChildPath()};
  if (no_sync) args.push_back("--no-sync");
  args.insert(args.end(), {store, std::to_string(start), std::to_string(count)});
  ChildProcess child;
  ASSERT_TRUE(child.Start(args).ok());
  std::string output = child.ReadOutput();
  int status = child.Wait();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "store_crash_child " << store << " " << start << " " << count << " failed; output:\n"
      << output;
  auto committed = CommittedGenerations(output);
  ASSERT_TRUE(committed.has_value()) << output;
  ASSERT_EQ(committed->size(), count);
  if (count > 0) {
    EXPECT_EQ(committed->back(), start + count);
  }
}

uint64_t EnvNumber(const char* name, uint64_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  return std::strtoull(text, nullptr, 10);
}

class StoreCrashKillTest : public StoreCrashFixture {};

TEST_F(StoreCrashKillTest, KilledWriterLeavesALastCommittedGeneration) {
  const uint64_t seed = EnvNumber("COHORT_STORE_CRASH_SEED", 20240611);
  const uint64_t trials = EnvNumber("COHORT_STORE_CRASH_TRIALS", 50);
  const std::string killed = Path("killed");
  const std::string reference = Path("reference");
  ASSERT_TRUE(InitStore(killed).ok());
  ASSERT_TRUE(InitStore(reference).ok());

  // Even trials kill anywhere in [0, start-up + commit window]; odd trials wait for the
  // child's first "committed" line and then kill anywhere in the commit window, so kills land
  // before, inside and between commits whatever the machine's load. (Timed from the start
  // alone, a loaded machine once stretched start-up past every kill: 50 trials, none
  // advanced.) The window is at least 40 ms, and long enough for a couple of commits where
  // fsync is slow. Start-up (exec, loading, and under ASan its shadow memory: tens of ms) is
  // measured on its own.
  const std::string timing = Path("timing");
  ASSERT_TRUE(InitStore(timing).ok());
  auto start = std::chrono::steady_clock::now();
  ASSERT_NO_FATAL_FAILURE(RunChildToEnd(timing, 0, 0, /*no_sync=*/false));
  const auto startup_time = std::chrono::steady_clock::now() - start;
  start = std::chrono::steady_clock::now();
  ASSERT_NO_FATAL_FAILURE(RunChildToEnd(timing, 0, 3, /*no_sync=*/false));
  const auto three_commits = std::chrono::steady_clock::now() - start;
  const auto commit_time =
      (three_commits > startup_time ? three_commits - startup_time : three_commits) / 3;
  fs::remove_all(timing);
  const auto commit_window = std::clamp<std::chrono::microseconds>(
      std::chrono::duration_cast<std::chrono::microseconds>(commit_time * 5 / 2),
      std::chrono::milliseconds(40), std::chrono::milliseconds(250));
  const auto max_delay =
      std::chrono::duration_cast<std::chrono::microseconds>(startup_time) + commit_window;

  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> delay_us(0, max_delay.count());
  std::uniform_int_distribution<int64_t> delay_after_commit_us(0, commit_window.count());
  uint64_t reference_generation = 0;
  uint64_t trials_that_advanced = 0;
  uint64_t trials_that_left_files = 0;
  uint64_t kills_after_rename_before_report = 0;
  const auto test_start = std::chrono::steady_clock::now();
  for (uint64_t trial = 0; trial < trials; trial++) {
    auto before = ReadCurrent(Env::Default(), killed);
    ASSERT_TRUE(before.ok()) << before.status().ToString();
    const uint64_t start_generation = *before;
    const bool after_first_commit = trial % 2 == 1;
    const auto delay =
        std::chrono::microseconds(after_first_commit ? delay_after_commit_us(rng) : delay_us(rng));
    SCOPED_TRACE("trial " + std::to_string(trial) + " (seed " + std::to_string(seed) +
                 "), from generation " + std::to_string(start_generation) + ", kill " +
                 std::to_string(delay.count()) + " us after " +
                 (after_first_commit ? "its first commit" : "the start"));

    ChildProcess child;
    ASSERT_TRUE(
        child.Start({ChildPath(), killed, std::to_string(start_generation), "1000000"}).ok());
    if (after_first_commit) ASSERT_TRUE(child.WaitForLine()) << "the child ended before a commit";
    std::this_thread::sleep_for(delay);
    child.Kill();
    const int wait_status = child.Wait();
    const std::string output = child.ReadOutput();
    ASSERT_TRUE(WIFSIGNALED(wait_status) && WTERMSIG(wait_status) == SIGKILL)
        << "the child ended on its own; output:\n"
        << output;
    auto committed = CommittedGenerations(output);
    ASSERT_TRUE(committed.has_value()) << output;
    for (size_t i = 0; i < committed->size(); i++) {
      ASSERT_EQ((*committed)[i], start_generation + 1 + i) << output;
    }
    const uint64_t last_reported = committed->empty() ? start_generation : committed->back();

    ExpectVerifies(killed);
    auto current = ReadCurrent(Env::Default(), killed);
    ASSERT_TRUE(current.ok()) << current.status().ToString();
    const uint64_t generation = *current;
    ASSERT_GE(generation, last_reported);
    // At most the commit under way when the kill came is there unreported.
    ASSERT_LE(generation, last_reported + 1);
    if (generation > start_generation) trials_that_advanced++;
    if (generation > last_reported) kills_after_rename_before_report++;
    auto strays = StrayFiles(killed);
    ASSERT_TRUE(strays.ok()) << strays.status().ToString();
    if (!strays->empty()) trials_that_left_files++;

    if (generation > reference_generation) {
      ASSERT_NO_FATAL_FAILURE(RunChildToEnd(reference, reference_generation,
                                            generation - reference_generation,
                                            /*no_sync=*/true));
      reference_generation = generation;
    }
    for (uint64_t g = std::max<uint64_t>(start_generation, 1); g <= generation; g++) {
      auto want = ReadGeneration(reference, g);
      auto got = ReadGeneration(killed, g);
      ASSERT_TRUE(want.ok()) << want.status().ToString();
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      ASSERT_EQ(DescribeDifference(*want, *got), "") << "generation " << g;
    }
  }

  // The last kill's leftovers go with the next writer.
  {
    auto txn = Transaction::Begin(killed);
    ASSERT_TRUE(txn.ok()) << txn.status().ToString();
    auto strays = StrayFiles(killed);
    ASSERT_TRUE(strays.ok());
    EXPECT_TRUE(strays->empty()) << Join(*strays);
  }
  const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - test_start);
  std::cout << trials << " kills in " << elapsed.count() << " ms (commit ~"
            << std::chrono::duration_cast<std::chrono::milliseconds>(commit_time).count()
            << " ms, start-up "
            << std::chrono::duration_cast<std::chrono::milliseconds>(startup_time).count()
            << " ms, kill delay 0-" << max_delay.count() / 1000 << " ms from the start or 0-"
            << commit_window.count() / 1000 << " ms from the first commit): store advanced in "
            << trials_that_advanced << ", leftovers after " << trials_that_left_files
            << ", committed but unreported in " << kills_after_rename_before_report
            << "; final generation " << reference_generation << "\n";
  EXPECT_GT(trials_that_advanced, 0u);
  EXPECT_GT(trials_that_left_files, 0u);
}

}  // namespace
}  // namespace cohort::store
