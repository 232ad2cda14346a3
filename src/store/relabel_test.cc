// Transaction::Relabel: new labels for live rows, same ids, same order, old rows dead.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "store/store.h"
#include "store/test_util.h"
#include "store/transaction.h"

namespace cohort::store {
namespace {

using testing::ClassLabels;
using testing::ScratchDir;
using testing::Uint8Features;

TableSchema Schema(LabelKind kind, std::vector<uint64_t> label_shape = {}) {
  TableSchema s;
  s.feature_dtype = Dtype::kUint8;
  s.feature_shape = {2, 3};
  s.label_kind = kind;
  s.label_shape = std::move(label_shape);
  return s;
}

// Tables: train (class labels, samples 0..n-1 labelled 0..n-1), reg (vector labels (2,),
// samples n..n+3, labelled 0), pool (no labels, samples n+4..n+5).
std::string MakeStore(uint64_t n) {
  std::string dir = ScratchDir("store");
  EXPECT_TRUE(InitStore(dir).ok());
  auto txn = Transaction::Begin(dir);
  EXPECT_TRUE(txn.ok()) << txn.status().ToString();
  EXPECT_TRUE((*txn)->CreateTable("train", Schema(LabelKind::kClass)).ok());
  EXPECT_TRUE((*txn)->CreateTable("reg", Schema(LabelKind::kVector, {2})).ok());
  EXPECT_TRUE((*txn)->CreateTable("pool", Schema(LabelKind::kNone)).ok());
  HostArray y = ClassLabels(n);
  EXPECT_TRUE((*txn)->Append("train", Uint8Features(n), &y).ok());
  HostArray vy(Dtype::kFloat32, {4, 2});
  EXPECT_TRUE((*txn)->Append("reg", Uint8Features(4, static_cast<uint8_t>(n)), &vy).ok());
  EXPECT_TRUE((*txn)->Append("pool", Uint8Features(2, static_cast<uint8_t>(n + 4)), nullptr).ok());
  auto gen = (*txn)->Commit("import");
  EXPECT_TRUE(gen.ok()) << gen.status().ToString();
  return dir;
}

std::vector<int64_t> LabelsOf(const Table& t) {
  HostArray y = t.ReadLabels();
  return std::vector<int64_t>(y.as<int64_t>(), y.as<int64_t>() + t.size());
}

uint64_t DeadRows(const Table& t) {
  uint64_t held = 0;
  for (const auto& seg : t.entry().segments) held += seg.rows;
  return held - t.size();
}

std::set<std::string> FilesIn(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.insert(e.path().filename().string());
  }
  return names;
}

TEST(RelabelTest, NewLabelsSameIdsSameOrderOtherRowsUntouched) {
  std::string dir = MakeStore(10);
  auto txn = Transaction::Begin(dir);
  ASSERT_TRUE(txn.ok());
  std::vector<uint64_t> ids{7, 2};
  HostArray labels = ClassLabels(2, 70);  // 7 -> 70, 2 -> 71
  ASSERT_TRUE((*txn)->Relabel("train", ids, labels).ok());
  EXPECT_EQ(*(*txn)->TableIds("train"), (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  auto gen = (*txn)->Commit("relabel");
  ASSERT_TRUE(gen.ok()) << gen.status().ToString();

  auto snap = Snapshot::Open(dir);
  ASSERT_TRUE(snap.ok());
  const Table* train = *(*snap)->table("train");
  EXPECT_EQ(train->Ids(), (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(LabelsOf(*train), (std::vector<int64_t>{0, 1, 71, 3, 4, 5, 6, 70, 8, 9}));
  HostArray x = train->ReadFeatures();
  EXPECT_EQ(std::memcmp(x.data.data(), Uint8Features(10).data.data(), x.data.size()), 0);
  // The two old rows are dead, exactly as if they had been removed.
  EXPECT_EQ(DeadRows(*train), 2u);
  EXPECT_EQ(train->entry().segments.size(), 2u);
  // Tables the relabel left alone keep their rows files.
  auto before = Snapshot::Open(dir, *gen - 1);
  ASSERT_TRUE(before.ok());
  EXPECT_EQ((*(*snap)->table("reg"))->entry().rows_file.file,
            (*(*before)->table("reg"))->entry().rows_file.file);
  Status verified = VerifyGeneration(dir, *gen);
  EXPECT_TRUE(verified.ok()) << verified.ToString();
}

TEST(RelabelTest, VectorLabelsAndRowsWrittenInTheSameTransaction) {
  std::string dir = MakeStore(4);
  auto txn = Transaction::Begin(dir);
  ASSERT_TRUE(txn.ok());
  HostArray y(Dtype::kFloat32, {2, 2});
  for (int i = 0; i < 4; i++) y.as<float>()[i] = 0.5f + static_cast<float>(i);
  std::vector<uint64_t> ids{5, 6};
  ASSERT_TRUE((*txn)->Relabel("reg", ids, y).ok());
  // Relabelling again rows this transaction already relabelled: the middle segment is named
  // by no generation and must not stay behind.
  for (int i = 0; i < 4; i++) y.as<float>()[i] = 10.0f + static_cast<float>(i);
  ASSERT_TRUE((*txn)->Relabel("reg", ids, y).ok());
  // And rows that moved in during this transaction.
  std::vector<uint64_t> moved{8};
  HostArray with = ClassLabels(1, 5);
  ASSERT_TRUE((*txn)->Move("pool", "train", moved, &with).ok());
  HostArray again = ClassLabels(1, 6);
  ASSERT_TRUE((*txn)->Relabel("train", moved, again).ok());
  auto gen = (*txn)->Commit("relabel");
  ASSERT_TRUE(gen.ok()) << gen.status().ToString();

  auto snap = Snapshot::Open(dir);
  const Table* reg = *(*snap)->table("reg");
  EXPECT_EQ(reg->Ids(), (std::vector<uint64_t>{4, 5, 6, 7}));
  HostArray labels = reg->ReadLabels();
  EXPECT_EQ(labels.as<float>()[0], 0.0f);
  EXPECT_EQ(labels.as<float>()[2], 10.0f);
  EXPECT_EQ(labels.as<float>()[5], 13.0f);
  EXPECT_EQ(labels.as<float>()[6], 0.0f);
  const Table* train = *(*snap)->table("train");
  EXPECT_EQ(train->Ids(), (std::vector<uint64_t>{0, 1, 2, 3, 8}));
  EXPECT_EQ(LabelsOf(*train).back(), 6);
  EXPECT_EQ(static_cast<uint8_t>(train->features(4)[0]), 8);
  Status verified = VerifyGeneration(dir, *gen);
  EXPECT_TRUE(verified.ok()) << verified.ToString();
  // Every data file left is one some generation names.
  auto report = VerifyStore(dir);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok());
  size_t segment_files = 0;
  for (const auto& name : FilesIn(dir)) segment_files += name.find("-seg-") != std::string::npos;
  // The import wrote 8 (train and reg: x, y, id; pool: x, id); this commit keeps reg's second
  // relabel (3) and train's relabel (3); the move's segment died in the transaction.
  EXPECT_EQ(segment_files, 8u + 3u + 3u);
}

TEST(RelabelTest, CompactionCountsRelabelledRowsAsDead) {
  std::string dir = MakeStore(4);
  auto txn = Transaction::Begin(dir);
  ASSERT_TRUE(txn.ok());
  std::vector<uint64_t> ids{0, 1, 2};
  ASSERT_TRUE((*txn)->Relabel("train", ids, ClassLabels(3, 9)).ok());
  auto compacted = (*txn)->Compact(0.5);  // train: 3 dead of 7 held, below
  ASSERT_TRUE(compacted.ok());
  EXPECT_TRUE(compacted->empty());
  compacted = (*txn)->Compact(0.4);
  ASSERT_TRUE(compacted.ok());
  EXPECT_EQ(*compacted, (std::vector<std::string>{"train"}));
  ASSERT_TRUE((*txn)->Commit("relabel + compact").ok());
  auto snap = Snapshot::Open(dir);
  const Table* train = *(*snap)->table("train");
  EXPECT_EQ(LabelsOf(*train), (std::vector<int64_t>{9, 10, 11, 3}));
  EXPECT_EQ(DeadRows(*train), 0u);
}

TEST(RelabelTest, RefusalsNameTheTableAndIdsAndChangeNothing) {
  std::string dir = MakeStore(10);
  std::set<std::string> files_before = FilesIn(dir);
  auto txn = Transaction::Begin(dir);
  ASSERT_TRUE(txn.ok());

  std::vector<uint64_t> unknown{1, 99, 100, 3};
  Status st = (*txn)->Relabel("train", unknown, ClassLabels(4));
  EXPECT_TRUE(st.IsNotFound()) << st.ToString();
  EXPECT_EQ(st.message(), "2 sample ids 99, 100 are not in table train");

  std::vector<uint64_t> twice{4, 5, 4};
  st = (*txn)->Relabel("train", twice, ClassLabels(3));
  EXPECT_TRUE(st.IsInvalidArgument()) << st.ToString();
  EXPECT_EQ(st.message(), "sample id 4 is given twice for table train");

  std::vector<uint64_t> two{1, 2};
  HostArray floats(Dtype::kFloat32, {2});
  st = (*txn)->Relabel("train", two, floats);
  EXPECT_TRUE(st.IsInvalidArgument());
  EXPECT_EQ(st.message(), "table train: labels are float32(2,), table needs int64(2,)");

  st = (*txn)->Relabel("train", two, ClassLabels(3));
  EXPECT_TRUE(st.IsInvalidArgument());
  EXPECT_EQ(st.message(), "relabel train: 3 labels for 2 samples");

  std::vector<uint64_t> reg_ids{10, 11};
  HostArray wrong_shape(Dtype::kFloat32, {2, 3});
  st = (*txn)->Relabel("reg", reg_ids, wrong_shape);
  EXPECT_TRUE(st.IsInvalidArgument());
  EXPECT_EQ(st.message(), "table reg: labels are float32(2, 3), table needs float32(2, 2)");

  std::vector<uint64_t> pool_ids{14};
  st = (*txn)->Relabel("pool", pool_ids, ClassLabels(1));
  EXPECT_TRUE(st.IsInvalidArgument());
  EXPECT_EQ(st.message(), "cannot relabel table pool: it has no labels");

  st = (*txn)->Relabel("trian", two, ClassLabels(2));
  EXPECT_TRUE(st.IsNotFound());
  EXPECT_NE(st.message().find("did you mean 'train'?"), std::string::npos) << st.message();

  // Nothing was written, and the transaction has nothing to commit.
  EXPECT_EQ(*(*txn)->TableIds("train"), (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  auto commit = (*txn)->Commit("nothing");
  EXPECT_TRUE(commit.status().IsInvalidArgument()) << commit.status().ToString();
  EXPECT_EQ(FilesIn(dir), files_before);
}

TEST(RelabelTest, RefusesToCopyRowsOutOfADamagedSegment) {
  std::string dir = MakeStore(4);
  auto snap = Snapshot::Open(dir);
  ASSERT_TRUE(snap.ok());
  std::string x_file = (*(*snap)->table("train"))->entry().segments[0].x.file;
  {
    // Flip a byte of the last feature row: the header stays valid, the checksum does not.
    std::fstream f(dir + "/" + x_file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  auto txn = Transaction::Begin(dir);
  ASSERT_TRUE(txn.ok());
  std::vector<uint64_t> ids{1};
  Status st = (*txn)->Relabel("train", ids, ClassLabels(1, 3));
  EXPECT_TRUE(st.IsCorruption()) << st.ToString();
  EXPECT_NE(st.message().find(x_file), std::string::npos) << st.message();
}

}  // namespace
}  // namespace cohort::store
