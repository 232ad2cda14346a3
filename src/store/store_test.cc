#include "store/store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "store/snapshot.h"
#include "store/test_util.h"
#include "store/transaction.h"

namespace cohort::store {
namespace {

using testing::ClassLabels;
using testing::ScratchDir;
using testing::Uint8Features;

std::string MakeStore(const std::string& leaf = "store") {
  std::string dir = ScratchDir(leaf);
  EXPECT_TRUE(InitStore(dir).ok());
  {
    auto txn = Transaction::Begin(dir);
    EXPECT_TRUE(txn.ok()) << txn.status().ToString();
    TableSchema s;
    s.feature_dtype = Dtype::kUint8;
    s.feature_shape = {2, 3};
    EXPECT_TRUE((*txn)->CreateTable("train", s).ok());
    HostArray x = Uint8Features(10);
    HostArray y = ClassLabels(10);
    EXPECT_TRUE((*txn)->Append("train", x, &y).ok());
    EXPECT_TRUE((*txn)->Commit("import").ok());
  }
  auto txn = Transaction::Begin(dir);
  EXPECT_TRUE(txn.ok()) << txn.status().ToString();
  std::vector<uint64_t> ids{2, 3, 4};
  EXPECT_TRUE((*txn)->Move("train", "pool", ids).ok());
  EXPECT_TRUE((*txn)->Commit("split").ok());
  return dir;
}

TEST(StoreTest, InitCreatesGenerationZeroAndRefusesTwice) {
  std::string dir = ScratchDir("store");
  ASSERT_TRUE(InitStore(dir).ok());
  auto snap = Snapshot::Open(dir);
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ((*snap)->generation(), 0u);
  EXPECT_TRUE((*snap)->table_names().empty());
  EXPECT_EQ(InitStore(dir).code(), Status::Code::kAlreadyExists);
  std::string busy = ScratchDir("busy");
  std::filesystem::create_directories(busy);
  std::ofstream(busy + "/somefile") << "x";
  EXPECT_TRUE(InitStore(busy).IsInvalidArgument());
}

TEST(StoreTest, HistoryListsGenerationsWithParents) {
  std::string dir = MakeStore();
  auto history = ReadHistory(dir);
  ASSERT_TRUE(history.ok());
  ASSERT_EQ(history->size(), 3u);
  EXPECT_FALSE((*history)[0].parent.has_value());
  EXPECT_EQ((*history)[1].parent, 0u);
  EXPECT_EQ((*history)[2].parent, 1u);
  EXPECT_EQ((*history)[2].note, "split");
}

TEST(StoreTest, DiffShowsAddedAndRemovedIds) {
  std::string dir = MakeStore();
  auto diff = DiffGenerations(dir, 1, 2);
  ASSERT_TRUE(diff.ok());
  EXPECT_EQ((*diff)["pool"].added, (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_TRUE((*diff)["pool"].removed.empty());
  EXPECT_EQ((*diff)["train"].removed, (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_FALSE(DiffGenerations(dir, 1, 9).ok());
}

TEST(StoreTest, VerifyPassesOnSoundStoreAndFailsOnDamage) {
  std::string dir = MakeStore();
  auto report = VerifyStore(dir);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok());
  EXPECT_EQ(report->generations, 3u);
  EXPECT_GT(report->files, 4u);
  std::filesystem::remove(dir + "/pool-seg-000001.y.npy");
  report = VerifyStore(dir);
  ASSERT_TRUE(report.ok());
  ASSERT_FALSE(report->ok());
  EXPECT_NE(report->problems[0].find("pool-seg-000001.y.npy"), std::string::npos);
  // Generation 1 predates the damage and still verifies on its own.
  EXPECT_TRUE(VerifyStore(dir, 1)->ok());
}

TEST(StoreTest, CloneHardLinksFilesAndRecordsOrigin) {
  std::string src = MakeStore("src");
  std::string dst = ScratchDir("dst");
  auto gen = CloneStore(src, dst, 1);
  ASSERT_TRUE(gen.ok()) << gen.status().ToString();
  EXPECT_EQ(*gen, 1u);
  auto snap = Snapshot::Open(dst);
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ((*snap)->generation(), 1u);
  ASSERT_TRUE((*snap)->manifest().origin.has_value());
  EXPECT_EQ((*snap)->manifest().origin->generation, 1u);
  EXPECT_EQ((*(*snap)->table("train"))->size(), 10u);
  EXPECT_FALSE((*snap)->has_table("pool"));
  struct stat a {};
  struct stat b {};
  ASSERT_EQ(::stat((src + "/train-seg-000000.x.npy").c_str(), &a), 0);
  ASSERT_EQ(::stat((dst + "/train-seg-000000.x.npy").c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_TRUE(VerifyStore(dst)->ok());
  // The clone evolves on its own; the source is untouched.
  auto txn = Transaction::Begin(dst);
  std::vector<uint64_t> ids{0};
  ASSERT_TRUE((*txn)->Remove("train", ids).ok());
  EXPECT_EQ(*(*txn)->Commit("clone change"), 2u);
  EXPECT_EQ((*(*Snapshot::Open(src))->table("train"))->size(), 7u);
  EXPECT_EQ((*(*Snapshot::Open(dst))->table("train"))->size(), 9u);
  EXPECT_EQ(CloneStore(src, dst).status().code(), Status::Code::kAlreadyExists);
}

TEST(StoreTest, InitAndCloneRefuseAStoreThatLostCurrent) {
  std::string dir = MakeStore();
  std::filesystem::remove(dir + "/CURRENT");
  Status st = InitStore(dir);
  ASSERT_TRUE(st.IsInvalidArgument()) << st.ToString();
  EXPECT_NE(st.message().find("no CURRENT"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(dir + "/gen-000002.json"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/train-seg-000000.x.npy"));
}

TEST(StoreTest, PruneWithAHugeKeepKeepsEverything) {
  std::string dir = MakeStore();
  auto report = PruneGenerations(dir, UINT64_MAX);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->removed_generations.empty());
  EXPECT_EQ(report->removed_files, 0u);
  EXPECT_TRUE(VerifyStore(dir)->ok());
  EXPECT_EQ(ReadHistory(dir)->size(), 3u);
}

TEST(StoreTest, VerifyReportsEveryDamagedFile) {
  std::string dir = MakeStore();
  std::filesystem::remove(dir + "/pool-seg-000001.x.npy");
  std::filesystem::resize_file(dir + "/train-seg-000000.y.npy", 10);
  auto report = VerifyStore(dir);
  ASSERT_TRUE(report.ok());
  std::string all;
  for (const auto& p : report->problems) all += p + "\n";
  EXPECT_NE(all.find("pool-seg-000001.x.npy"), std::string::npos) << all;
  EXPECT_NE(all.find("train-seg-000000.y.npy"), std::string::npos) << all;
}

TEST(StoreTest, WriterCleansUpLeftoversOfAnInterruptedCommit) {
  std::string dir = MakeStore();
  // What a writer killed mid-commit leaves: a segment, a rows file, a manifest and temp files.
  std::ofstream(dir + "/train-seg-000009.x.npy") << "partial";
  std::ofstream(dir + "/train-gen-000003.rows.npy") << "partial";
  std::ofstream(dir + "/gen-000003.json") << "partial";
  std::ofstream(dir + "/CURRENT.tmp") << "partial";
  std::ofstream(dir + "/notes.txt") << "the user's own file";
  EXPECT_TRUE(Snapshot::Open(dir).ok());  // readers are not disturbed
  EXPECT_EQ((*Snapshot::Open(dir))->generation(), 2u);
  {
    auto txn = Transaction::Begin(dir);
    ASSERT_TRUE(txn.ok()) << txn.status().ToString();
  }
  for (const char* gone :
       {"train-seg-000009.x.npy", "train-gen-000003.rows.npy", "gen-000003.json", "CURRENT.tmp"}) {
    EXPECT_FALSE(std::filesystem::exists(dir + "/" + gone)) << gone;
  }
  EXPECT_TRUE(std::filesystem::exists(dir + "/notes.txt"));
  EXPECT_TRUE(VerifyStore(dir)->ok());
}

TEST(StoreTest, PruneKeepsTheNewestGenerationsAndTheirFilesOnly) {
  std::string dir = MakeStore();  // generations 0 (init), 1 (import), 2 (split)
  {
    auto txn = Transaction::Begin(dir);
    ASSERT_TRUE((*txn)->Compact(0.1).ok());  // train loses its first segment's role
    ASSERT_TRUE((*txn)->Commit("compact").ok());
  }
  auto held = Snapshot::Open(dir, 1);  // a reader on a generation about to be pruned
  ASSERT_TRUE(held.ok());
  HostArray held_x = (*(*held)->table("train"))->ReadFeatures();
  auto current_before = (*(*Snapshot::Open(dir))->table("train"))->ReadFeatures();

  EXPECT_TRUE(PruneGenerations(dir, 0).status().IsInvalidArgument());
  auto report = PruneGenerations(dir, 2);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->removed_generations, (std::vector<uint64_t>{0, 1}));
  EXPECT_GT(report->removed_files, 0u);
  EXPECT_FALSE(std::filesystem::exists(dir + "/gen-000001.json"));
  // Segment 0 held train's rows up to generation 2, which is kept: it must survive.
  EXPECT_TRUE(std::filesystem::exists(dir + "/train-seg-000000.x.npy"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/train-gen-000001.rows.npy"));
  EXPECT_TRUE(Snapshot::Open(dir, 1).status().IsNotFound());
  EXPECT_TRUE(VerifyStore(dir)->ok());
  EXPECT_EQ((*(*Snapshot::Open(dir))->table("train"))->ReadFeatures().data, current_before.data);
  EXPECT_EQ((*(*held)->table("train"))->ReadFeatures().data, held_x.data);

  // Keeping one generation frees the pre-compaction segment too; running again is a no-op.
  report = PruneGenerations(dir, 1);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->removed_generations, (std::vector<uint64_t>{2}));
  EXPECT_FALSE(std::filesystem::exists(dir + "/train-seg-000000.x.npy"));
  EXPECT_TRUE(VerifyStore(dir)->ok());
  report = PruneGenerations(dir, 1);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->removed_generations.empty());
  EXPECT_EQ(report->removed_files, 0u);
  // The store goes on from where it was.
  auto txn = Transaction::Begin(dir);
  ASSERT_TRUE(txn.ok());
  std::vector<uint64_t> ids{0};
  ASSERT_TRUE((*txn)->Remove("train", ids).ok());
  EXPECT_EQ(*(*txn)->Commit("after prune"), 4u);
}

}  // namespace
}  // namespace cohort::store
