#include "store/snapshot.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "store/store.h"
#include "store/test_util.h"
#include "store/transaction.h"

namespace cohort::store {
namespace {

using testing::ClassLabels;
using testing::ScratchDir;
using testing::Uint8Features;

std::string MakeStore() {
  std::string dir = ScratchDir("store");
  EXPECT_TRUE(InitStore(dir).ok());
  auto txn = Transaction::Begin(dir);
  TableSchema s;
  s.feature_dtype = Dtype::kUint8;
  s.feature_shape = {2, 3};
  EXPECT_TRUE((*txn)->CreateTable("train", s).ok());
  HostArray x = Uint8Features(20);
  HostArray y = ClassLabels(20);
  EXPECT_TRUE((*txn)->Append("train", x, &y).ok());
  EXPECT_TRUE((*txn)->Commit("import").ok());
  return dir;
}

void FlipByte(const std::string& path, std::streamoff offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(offset);
  f.write(&c, 1);
}

std::string ErrorOf(const std::string& dir, std::optional<uint64_t> gen = {}) {
  auto snap = Snapshot::Open(dir, gen);
  return snap.ok() ? "" : snap.status().message();
}

TEST(SnapshotTest, MissingGenerationAndMissingStore) {
  std::string dir = MakeStore();
  auto snap = Snapshot::Open(dir, 7);
  ASSERT_FALSE(snap.ok());
  EXPECT_TRUE(snap.status().IsNotFound());
  EXPECT_NE(snap.status().message().find("generation 7"), std::string::npos);
  auto nostore = Snapshot::Open(dir + "/nope");
  EXPECT_TRUE(nostore.status().IsNotFound());
  EXPECT_EQ(nostore.status().message(), dir + "/nope does not exist");
  // A directory that exists but holds no store is told apart from a path that is not there.
  auto notstore = Snapshot::Open(dir + "/..");
  EXPECT_NE(notstore.status().message().find("not a cohort store"), std::string::npos);
}

TEST(SnapshotTest, UncommittedGenerationIsNotOpened) {
  std::string dir = MakeStore();
  // A manifest newer than CURRENT: what a writer killed before switching CURRENT leaves.
  auto m = *ReadManifest(Env::Default(), dir, 1);
  m.generation = 2;
  m.parent = 1;
  ASSERT_TRUE(WriteManifest(Env::Default(), dir, m).ok());
  auto snap = Snapshot::Open(dir, 2);
  ASSERT_FALSE(snap.ok());
  EXPECT_TRUE(snap.status().IsNotFound());
  EXPECT_NE(snap.status().message().find("not committed"), std::string::npos);
}

TEST(SnapshotTest, UnknownTableListsTheTablesThatExist) {
  std::string dir = MakeStore();
  auto snap = Snapshot::Open(dir);
  auto t = (*snap)->table("pool");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("tables: train"), std::string::npos);
  EXPECT_EQ(t.status().message().find("did you mean"), std::string::npos);
  auto typo = (*snap)->table("trian");
  EXPECT_NE(typo.status().message().find("(tables: train); did you mean 'train'?"),
            std::string::npos);
}

TEST(SnapshotTest, TruncatedSegmentIsNamed) {
  std::string dir = MakeStore();
  std::string seg = dir + "/train-seg-000000.x.npy";
  std::filesystem::resize_file(seg, std::filesystem::file_size(seg) - 3);
  std::string err = ErrorOf(dir);
  EXPECT_NE(err.find("train-seg-000000.x.npy"), std::string::npos) << err;
  EXPECT_NE(err.find("truncated"), std::string::npos) << err;
}

TEST(SnapshotTest, DamagedSegmentHeaderIsNamed) {
  std::string dir = MakeStore();
  FlipByte(dir + "/train-seg-000000.id.npy", 1);
  std::string err = ErrorOf(dir);
  EXPECT_NE(err.find("train-seg-000000.id.npy"), std::string::npos) << err;
}

TEST(SnapshotTest, BitFlippedSegmentDataIsCaughtByVerifyNamingTheFile) {
  std::string dir = MakeStore();
  std::string seg = dir + "/train-seg-000000.x.npy";
  FlipByte(seg, static_cast<std::streamoff>(std::filesystem::file_size(seg) - 10));
  auto report = VerifyStore(dir);
  ASSERT_TRUE(report.ok());
  ASSERT_FALSE(report->ok());
  EXPECT_NE(report->problems[0].find("train-seg-000000.x.npy"), std::string::npos);
  EXPECT_NE(report->problems[0].find("checksum"), std::string::npos);
}

TEST(SnapshotTest, DamagedManifestIsNamed) {
  std::string dir = MakeStore();
  FlipByte(dir + "/gen-000001.json", 40);
  std::string err = ErrorOf(dir);
  EXPECT_NE(err.find("gen-000001.json"), std::string::npos) << err;
  std::filesystem::resize_file(dir + "/gen-000001.json", 30);
  err = ErrorOf(dir);
  EXPECT_NE(err.find("gen-000001.json"), std::string::npos) << err;
  EXPECT_TRUE(ErrorOf(dir, 0).empty());  // the older generation is intact
}

TEST(SnapshotTest, DamagedCurrentIsNamed) {
  std::string dir = MakeStore();
  FlipByte(dir + "/CURRENT", 9);  // a digit of the generation: checksum catches it
  std::string err = ErrorOf(dir);
  EXPECT_NE(err.find("CURRENT"), std::string::npos) << err;
  std::ofstream(dir + "/CURRENT", std::ios::trunc) << "garbage";
  err = ErrorOf(dir);
  EXPECT_NE(err.find("CURRENT"), std::string::npos) << err;
  std::filesystem::resize_file(dir + "/CURRENT", 0);
  EXPECT_NE(ErrorOf(dir).find("CURRENT"), std::string::npos);
}

TEST(SnapshotTest, MissingSegmentIsNamed) {
  std::string dir = MakeStore();
  std::filesystem::remove(dir + "/train-seg-000000.y.npy");
  std::string err = ErrorOf(dir);
  EXPECT_NE(err.find("train-seg-000000.y.npy"), std::string::npos) << err;
  EXPECT_NE(err.find("missing"), std::string::npos) << err;
}

}  // namespace
}  // namespace cohort::store
