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

// Flips one bit of `path` at `offset` (past a .npy header: in the data).
void FlipByte(const std::string& path, std::streamoff offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c = 0;
  f.get(c);
  f.seekp(offset);
  f.put(static_cast<char>(c ^ 1));
}

// CURRENT naming `generation`, with its checksum, as a user restoring an old one writes it.
void SetCurrent(const std::string& dir, uint64_t generation) {
  char name[32];
  std::snprintf(name, sizeof(name), "gen-%06llu", static_cast<unsigned long long>(generation));
  char line[64];
  std::snprintf(line, sizeof(line), "%s %08x\n", name, Crc32(std::string_view(name)));
  std::ofstream(dir + "/CURRENT", std::ios::trunc) << line;
}

TEST(StoreTest, DamagedSegmentsAreNeverCopiedIntoNewOnes) {
  // Issue 14: with a byte of a segment flipped, split and compact copied the damaged rows
  // into fresh segments with fresh checksums; prune then deleted the evidence.
  std::string dir = MakeStore();  // train: segment 0 (ids 0..9, 2..4 moved out); pool: 1
  FlipByte(dir + "/train-seg-000000.x.npy", 130);
  {
    auto txn = Transaction::Begin(dir);
    ASSERT_TRUE(txn.ok());
    std::vector<uint64_t> ids{5};
    Status st = (*txn)->Move("train", "pool", ids);
    EXPECT_TRUE(st.IsCorruption());
    EXPECT_EQ(st.message().rfind("table train: not copying rows from a damaged segment: " + dir +
                                     "/train-seg-000000.x.npy: checksum mismatch",
                                 0),
              0u)
        << st.message();
    EXPECT_TRUE((*txn)->Compact(0.0).status().IsCorruption());
  }
  // Rows of sound segments still move; removing rows copies nothing and is allowed.
  {
    auto txn = Transaction::Begin(dir);
    std::vector<uint64_t> ids{2};
    ASSERT_TRUE((*txn)->Move("pool", "train", ids).ok());
    ASSERT_TRUE((*txn)->Remove("train", std::vector<uint64_t>{6}).ok());
    ASSERT_TRUE((*txn)->Commit("sound").ok());
  }
  auto pruned = PruneGenerations(dir, 1);
  EXPECT_TRUE(pruned.status().IsCorruption());
  EXPECT_NE(pruned.status().message().find("refusing to prune"), std::string::npos);
  EXPECT_EQ(ReadHistory(dir)->size(), 4u);  // nothing deleted
  EXPECT_FALSE(VerifyStore(dir)->ok());

  Status gen = VerifyGeneration(dir, 3);
  EXPECT_TRUE(gen.IsCorruption());
  EXPECT_EQ(gen.message().rfind("generation 3 of " + dir + " is damaged: " + dir +
                                    "/train-seg-000000.x.npy: checksum mismatch",
                                0),
            0u)
      << gen.message();
  EXPECT_TRUE(VerifyGeneration(dir, 0).ok());
  EXPECT_TRUE(VerifyGeneration(dir, 9).IsNotFound());
}

TEST(StoreTest, VerifyGenerationPassesOnASoundGeneration) {
  std::string dir = MakeStore();
  for (uint64_t g : {0, 1, 2}) EXPECT_TRUE(VerifyGeneration(dir, g).ok()) << g;
  std::filesystem::remove(dir + "/pool-seg-000001.id.npy");
  EXPECT_TRUE(VerifyGeneration(dir, 1).ok());
  Status st = VerifyGeneration(dir, 2);
  EXPECT_NE(st.message().find("pool-seg-000001.id.npy: file named by generation 2 is missing"),
            std::string::npos)
      << st.message();
}

TEST(StoreTest, DamagedCurrentIsReportedOnce) {
  std::string dir = MakeStore();
  std::ofstream(dir + "/CURRENT", std::ios::trunc) << "gen-000002 00000000\n";
  auto report = VerifyStore(dir);
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->problems.size(), 1u) << report->problems[1];
  EXPECT_EQ(report->problems[0], dir + "/CURRENT: checksum mismatch");
  EXPECT_EQ(report->generations, 3u);
}

TEST(StoreTest, CurrentSetBackIsWarnedAndItsGenerationsAreNeverDeleted) {
  std::string dir = MakeStore();  // generations 0, 1, 2
  {
    auto txn = Transaction::Begin(dir);
    ASSERT_TRUE((*txn)->Remove("train", std::vector<uint64_t>{0}).ok());
    ASSERT_TRUE((*txn)->Commit("remove").ok());  // 3
  }
  SetCurrent(dir, 1);
  auto report = VerifyStore(dir);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok());
  ASSERT_EQ(report->warnings.size(), 1u);
  EXPECT_NE(report->warnings[0].find("names generation 1, but generations 2..3 have manifests"),
            std::string::npos)
      << report->warnings[0];
  auto txn = Transaction::Begin(dir);
  ASSERT_FALSE(txn.ok());
  EXPECT_TRUE(txn.status().IsCorruption());
  EXPECT_NE(txn.status().message().find("generations 2..3 were committed after it"),
            std::string::npos)
      << txn.status().message();
  EXPECT_TRUE(PruneGenerations(dir, 1).status().IsCorruption());
  EXPECT_TRUE(std::filesystem::exists(dir + "/gen-000003.json"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/train-gen-000003.rows.npy"));
  // Set back one generation: indistinguishable from an interrupted commit. Removed, but
  // with a note the caller shows.
  SetCurrent(dir, 3);
  ASSERT_TRUE(Transaction::Begin(dir).ok());
  SetCurrent(dir, 2);
  report = VerifyStore(dir);
  ASSERT_EQ(report->warnings.size(), 1u);
  EXPECT_NE(report->warnings[0].find("generation 3 is newer than CURRENT (2)"), std::string::npos);
  txn = Transaction::Begin(dir);
  ASSERT_TRUE(txn.ok()) << txn.status().ToString();
  ASSERT_EQ((*txn)->notes().size(), 1u);
  EXPECT_EQ((*txn)->notes()[0].rfind("removed generation 3 (" + dir + "/gen-000003.json)", 0), 0u);
}

TEST(StoreTest, HistoryEntriesMarkADamagedManifest) {
  std::string dir = MakeStore();
  FlipByte(dir + "/gen-000001.json", 20);
  EXPECT_FALSE(ReadHistory(dir).ok());
  auto entries = ReadHistoryEntries(dir);
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  ASSERT_EQ(entries->size(), 3u);
  EXPECT_TRUE((*entries)[0].manifest.has_value());
  EXPECT_FALSE((*entries)[1].manifest.has_value());
  EXPECT_EQ((*entries)[1].generation, 1u);
  EXPECT_NE((*entries)[1].damage.find("gen-000001.json"), std::string::npos);
  EXPECT_EQ((*entries)[2].manifest->note, "split");
}

}  // namespace
}  // namespace cohort::store
