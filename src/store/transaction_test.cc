#include "store/transaction.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>

#include "store/store.h"
#include "store/test_util.h"

namespace cohort::store {
namespace {

using testing::ClassLabels;
using testing::ScratchDir;
using testing::Uint8Features;

TableSchema ImageSchema() {
  TableSchema s;
  s.feature_dtype = Dtype::kUint8;
  s.feature_shape = {2, 3};
  s.label_kind = LabelKind::kClass;
  return s;
}

// A store with table "train" holding samples 0..n-1 (features Uint8Features(n), labels 0..n-1).
std::string MakeStore(uint64_t n) {
  std::string dir = ScratchDir("store");
  EXPECT_TRUE(InitStore(dir).ok());
  auto txn = Transaction::Begin(dir);
  EXPECT_TRUE(txn.ok()) << txn.status().ToString();
  EXPECT_TRUE((*txn)->CreateTable("train", ImageSchema()).ok());
  HostArray x = Uint8Features(n);
  HostArray y = ClassLabels(n);
  auto ids = (*txn)->Append("train", x, &y);
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  auto gen = (*txn)->Commit("import");
  EXPECT_TRUE(gen.ok()) << gen.status().ToString();
  return dir;
}

// The id of a sample is its position at import, and its first feature byte is id % 256.
void ExpectRowMatchesId(const Table& t, uint64_t row) {
  uint64_t id = t.id(row);
  EXPECT_EQ(static_cast<uint8_t>(t.features(row)[0]), static_cast<uint8_t>(id));
  EXPECT_EQ(static_cast<uint8_t>(t.features(row)[5]), static_cast<uint8_t>(id + 5));
}

TEST(TransactionTest, AppendCommitAndReadBack) {
  std::string dir = MakeStore(10);
  auto snap = Snapshot::Open(dir);
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  EXPECT_EQ((*snap)->generation(), 1u);
  auto t = (*snap)->table("train");
  ASSERT_TRUE(t.ok());
  ASSERT_EQ((*t)->size(), 10u);
  for (uint64_t r = 0; r < 10; r++) {
    EXPECT_EQ((*t)->id(r), r);
    ExpectRowMatchesId(**t, r);
    int64_t label;
    std::memcpy(&label, (*t)->label(r), 8);
    EXPECT_EQ(label, static_cast<int64_t>(r));
  }
}

TEST(TransactionTest, GatherCopiesRowsInRequestedOrder) {
  std::string dir = MakeStore(8);
  auto snap = Snapshot::Open(dir);
  ASSERT_TRUE(snap.ok());
  const Table* t = *(*snap)->table("train");
  std::vector<uint64_t> rows{7, 0, 3, 3};
  std::vector<std::byte> x(rows.size() * 6);
  std::vector<int64_t> y(rows.size());
  ASSERT_TRUE(t->GatherFeatures(rows, x.data()).ok());
  ASSERT_TRUE(t->GatherLabels(rows, reinterpret_cast<std::byte*>(y.data())).ok());
  for (size_t i = 0; i < rows.size(); i++) {
    EXPECT_EQ(std::memcmp(x.data() + i * 6, t->features(rows[i]), 6), 0);
    EXPECT_EQ(y[i], static_cast<int64_t>(rows[i]));
  }
  std::vector<uint64_t> bad{8};
  EXPECT_TRUE(t->GatherFeatures(bad, x.data()).IsInvalidArgument());
}

TEST(TransactionTest, AppendWritesNewSegmentAndKeepsOldFilesUntouched) {
  std::string dir = MakeStore(10);
  std::string seg0 = dir + "/train-seg-000000.x.npy";
  struct stat before {};
  ASSERT_EQ(::stat(seg0.c_str(), &before), 0);
  auto txn = Transaction::Begin(dir);
  ASSERT_TRUE(txn.ok());
  HostArray x = Uint8Features(5, 10);
  HostArray y = ClassLabels(5, 10);
  auto ids = (*txn)->Append("train", x, &y);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->front(), 10u);
  EXPECT_EQ(ids->back(), 14u);
  ASSERT_TRUE((*txn)->Commit("append").ok());
  struct stat after {};
  ASSERT_EQ(::stat(seg0.c_str(), &after), 0);
  EXPECT_EQ(before.st_mtim.tv_nsec, after.st_mtim.tv_nsec);
  EXPECT_EQ(before.st_ino, after.st_ino);
  // The new segment holds only the 5 new rows.
  auto snap = Snapshot::Open(dir);
  const Table* t = *(*snap)->table("train");
  ASSERT_EQ(t->entry().segments.size(), 2u);
  EXPECT_EQ(t->entry().segments[1].rows, 5u);
  EXPECT_EQ(t->size(), 15u);
  for (uint64_t r = 0; r < 15; r++) ExpectRowMatchesId(*t, r);
}

TEST(TransactionTest, RemoveWritesOnlyARowsFile) {
  std::string dir = MakeStore(10);
  auto names_before = std::filesystem::directory_iterator(dir);
  size_t files_before = std::distance(names_before, {});
  auto txn = Transaction::Begin(dir);
  ASSERT_TRUE(txn.ok());
  std::vector<uint64_t> ids{2, 5};
  ASSERT_TRUE((*txn)->Remove("train", ids).ok());
  ASSERT_TRUE((*txn)->Commit("remove").ok());
  size_t files_after = std::distance(std::filesystem::directory_iterator(dir), {});
  EXPECT_EQ(files_after, files_before + 2);  // manifest + rows file
  auto snap = Snapshot::Open(dir);
  const Table* t = *(*snap)->table("train");
  EXPECT_EQ(t->Ids(), (std::vector<uint64_t>{0, 1, 3, 4, 6, 7, 8, 9}));
  for (uint64_t r = 0; r < t->size(); r++) ExpectRowMatchesId(*t, r);
}

TEST(TransactionTest, UnknownAndRepeatedIdsAreRefusedAndChangeNothing) {
  std::string dir = MakeStore(5);
  auto txn = Transaction::Begin(dir);
  ASSERT_TRUE(txn.ok());
  std::vector<uint64_t> unknown{1, 99};
  Status st = (*txn)->Remove("train", unknown);
  EXPECT_TRUE(st.IsNotFound());
  EXPECT_NE(st.message().find("99"), std::string::npos);
  std::vector<uint64_t> twice{1, 1};
  EXPECT_TRUE((*txn)->Remove("train", twice).IsInvalidArgument());
  EXPECT_EQ(*(*txn)->TableSize("train"), 5u);
  EXPECT_TRUE((*txn)->Move("train", "pool", unknown).IsNotFound());
  EXPECT_TRUE((*txn)->Remove("nope", unknown).IsNotFound());
}

TEST(TransactionTest, MoveCarriesOrReplacesLabelsAcrossTablesAtomically) {
  std::string dir = MakeStore(10);
  {
    auto txn = Transaction::Begin(dir);
    ASSERT_TRUE(txn.ok());
    std::vector<uint64_t> to_pool{1, 4, 7};
    ASSERT_TRUE((*txn)->Move("train", "pool", to_pool).ok());
    ASSERT_TRUE((*txn)->Commit("split").ok());
  }
  auto txn = Transaction::Begin(dir);
  ASSERT_TRUE(txn.ok());
  std::vector<uint64_t> back{7, 1};
  HostArray new_labels(Dtype::kInt64, {2});
  new_labels.as<int64_t>()[0] = 70;
  new_labels.as<int64_t>()[1] = 10;
  ASSERT_TRUE((*txn)->Move("pool", "train", back, &new_labels).ok());
  auto gen = (*txn)->Commit("acquire");
  ASSERT_TRUE(gen.ok());
  EXPECT_EQ(*gen, 3u);

  auto split = Snapshot::Open(dir, 2);
  ASSERT_TRUE(split.ok());
  EXPECT_EQ((*(*split)->table("pool"))->Ids(), (std::vector<uint64_t>{1, 4, 7}));
  EXPECT_EQ((*(*split)->table("train"))->size(), 7u);

  auto snap = Snapshot::Open(dir);
  const Table* train = *(*snap)->table("train");
  const Table* pool = *(*snap)->table("pool");
  EXPECT_EQ(pool->Ids(), (std::vector<uint64_t>{4}));
  EXPECT_EQ(train->Ids(), (std::vector<uint64_t>{0, 2, 3, 5, 6, 8, 9, 7, 1}));
  for (uint64_t r = 0; r < train->size(); r++) ExpectRowMatchesId(*train, r);
  HostArray labels = train->ReadLabels();
  EXPECT_EQ(labels.as<int64_t>()[7], 70);
  EXPECT_EQ(labels.as<int64_t>()[8], 10);
  EXPECT_EQ(labels.as<int64_t>()[0], 0);
}

TEST(TransactionTest, MoveFromUnlabelledTableNeedsLabels) {
  std::string dir = ScratchDir("store");
  ASSERT_TRUE(InitStore(dir).ok());
  auto txn = Transaction::Begin(dir);
  ASSERT_TRUE(txn.ok());
  TableSchema pool_schema = ImageSchema();
  pool_schema.label_kind = LabelKind::kNone;
  ASSERT_TRUE((*txn)->CreateTable("pool", pool_schema).ok());
  ASSERT_TRUE((*txn)->CreateTable("train", ImageSchema()).ok());
  HostArray x = Uint8Features(4);
  HostArray y = ClassLabels(4);
  EXPECT_TRUE((*txn)->Append("pool", x, &y).status().IsInvalidArgument());
  ASSERT_TRUE((*txn)->Append("pool", x, nullptr).ok());
  std::vector<uint64_t> ids{0, 2};
  Status missing = (*txn)->Move("pool", "train", ids);
  EXPECT_TRUE(missing.IsInvalidArgument()) << missing.ToString();
  HostArray labels = ClassLabels(2, 5);
  ASSERT_TRUE((*txn)->Move("pool", "train", ids, &labels).ok());
  ASSERT_TRUE((*txn)->Commit("label two").ok());
  auto snap = Snapshot::Open(dir);
  const Table* train = *(*snap)->table("train");
  EXPECT_EQ(train->Ids(), (std::vector<uint64_t>{0, 2}));
  EXPECT_EQ(train->ReadLabels().as<int64_t>()[1], 6);
  EXPECT_EQ((*(*snap)->table("pool"))->label(0), nullptr);
}

TEST(TransactionTest, SchemaMismatchIsRefusedWithBothSchemasNamed) {
  std::string dir = MakeStore(3);
  auto txn = Transaction::Begin(dir);
  ASSERT_TRUE(txn.ok());
  HostArray wrong_shape(Dtype::kUint8, {2, 6});
  HostArray y = ClassLabels(2);
  Status st = (*txn)->Append("train", wrong_shape, &y).status();
  ASSERT_TRUE(st.IsInvalidArgument());
  EXPECT_NE(st.message().find("schema mismatch"), std::string::npos);
  EXPECT_NE(st.message().find("(6,)"), std::string::npos);
  HostArray wrong_dtype(Dtype::kFloat32, {2, 2, 3});
  EXPECT_TRUE((*txn)->Append("train", wrong_dtype, &y).status().IsInvalidArgument());
  HostArray x = Uint8Features(2);
  HostArray float_labels(Dtype::kFloat32, {2});
  EXPECT_TRUE((*txn)->Append("train", x, &float_labels).status().IsInvalidArgument());
  EXPECT_TRUE((*txn)->Append("train", x, nullptr).status().IsInvalidArgument());
  HostArray short_labels = ClassLabels(1);
  EXPECT_TRUE((*txn)->Append("train", x, &short_labels).status().IsInvalidArgument());
  TableSchema other = ImageSchema();
  other.feature_shape = {6};
  ASSERT_TRUE((*txn)->CreateTable("flat", other).ok());
  std::vector<uint64_t> ids{0};
  EXPECT_TRUE((*txn)->Move("train", "flat", ids).IsInvalidArgument());
}

TEST(TransactionTest, EmptyCommitIsRefusedUnlessAllowed) {
  std::string dir = MakeStore(3);
  auto txn = Transaction::Begin(dir);
  ASSERT_TRUE(txn.ok());
  auto refused = (*txn)->Commit("nothing");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("nothing to commit"), std::string::npos);
  auto allowed = (*txn)->Commit("marker", CommitOptions{.allow_empty = true});
  ASSERT_TRUE(allowed.ok());
  EXPECT_EQ(*allowed, 2u);
  EXPECT_FALSE((*txn)->Commit("again").ok());
}

TEST(TransactionTest, SecondWriterGetsBusyUntilFirstIsGone) {
  std::string dir = MakeStore(3);
  auto first = Transaction::Begin(dir);
  ASSERT_TRUE(first.ok());
  auto second = Transaction::Begin(dir);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(second.status().IsBusy());
  EXPECT_NE(second.status().message().find("LOCK"), std::string::npos);
  first->reset();
  auto third = Transaction::Begin(dir);
  EXPECT_TRUE(third.ok()) << third.status().ToString();
}

TEST(TransactionTest, AbortedTransactionLeavesNoFilesAndNoGeneration) {
  std::string dir = MakeStore(3);
  size_t files_before = std::distance(std::filesystem::directory_iterator(dir), {});
  {
    auto txn = Transaction::Begin(dir);
    ASSERT_TRUE(txn.ok());
    HostArray x = Uint8Features(4);
    HostArray y = ClassLabels(4);
    ASSERT_TRUE((*txn)->Append("train", x, &y).ok());
  }
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), files_before);
  auto snap = Snapshot::Open(dir);
  EXPECT_EQ((*snap)->generation(), 1u);
  auto again = Transaction::Begin(dir);
  ASSERT_TRUE(again.ok());
  HostArray x = Uint8Features(1);
  HostArray y = ClassLabels(1);
  auto ids = (*again)->Append("train", x, &y);
  EXPECT_EQ(ids->front(), 3u);  // an aborted append hands its ids back
}

TEST(TransactionTest, SnapshotStaysOnItsGenerationAcrossCommits) {
  std::string dir = MakeStore(6);
  auto old_snap = Snapshot::Open(dir);
  ASSERT_TRUE(old_snap.ok());
  const Table* old_train = *(*old_snap)->table("train");
  HostArray before = old_train->ReadFeatures();
  for (int i = 0; i < 3; i++) {
    auto txn = Transaction::Begin(dir);
    ASSERT_TRUE(txn.ok());
    std::vector<uint64_t> ids{(*(*txn)->TableIds("train"))[0]};
    ASSERT_TRUE((*txn)->Remove("train", ids).ok());
    HostArray x = Uint8Features(2, 100);
    HostArray y = ClassLabels(2);
    ASSERT_TRUE((*txn)->Append("train", x, &y).ok());
    ASSERT_TRUE((*txn)->Commit("churn").ok());
  }
  EXPECT_EQ((*old_snap)->generation(), 1u);
  EXPECT_EQ(old_train->size(), 6u);
  EXPECT_EQ(old_train->ReadFeatures().data, before.data);
  EXPECT_EQ((*Snapshot::Open(dir))->generation(), 4u);
}

TEST(TransactionTest, CompactRewritesDeadTablesAsOneCommit) {
  std::string dir = MakeStore(10);
  {
    auto txn = Transaction::Begin(dir);
    std::vector<uint64_t> ids{0, 1, 2, 3, 4, 5};
    ASSERT_TRUE((*txn)->Remove("train", ids).ok());
    ASSERT_TRUE((*txn)->Commit("drop most").ok());
  }
  auto before = Snapshot::Open(dir);
  HostArray x_before = (*(*before)->table("train"))->ReadFeatures();
  auto txn = Transaction::Begin(dir);
  auto none = (*txn)->Compact(0.7);  // 60% dead: below threshold
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  auto compacted = (*txn)->Compact(0.5);
  ASSERT_TRUE(compacted.ok());
  EXPECT_EQ(*compacted, std::vector<std::string>{"train"});
  ASSERT_TRUE((*txn)->Commit("compact").ok());
  auto after = Snapshot::Open(dir);
  const Table* t = *(*after)->table("train");
  ASSERT_EQ(t->entry().segments.size(), 1u);
  EXPECT_EQ(t->entry().segments[0].rows, 4u);
  EXPECT_EQ(t->Ids(), (std::vector<uint64_t>{6, 7, 8, 9}));
  EXPECT_EQ(t->ReadFeatures().data, x_before.data);
  // Older generations still read their data from the old segment.
  EXPECT_EQ((*(*Snapshot::Open(dir, 1))->table("train"))->size(), 10u);
}

TEST(TransactionTest, FailedMoveChangesNothing) {
  std::string dir = MakeStore(5);
  auto txn = Transaction::Begin(dir);
  ASSERT_TRUE(txn.ok());
  std::vector<uint64_t> ids{1, 99};
  EXPECT_TRUE((*txn)->Move("train", "pool", ids).IsNotFound());
  EXPECT_FALSE((*txn)->HasTable("pool"));
  EXPECT_EQ(*(*txn)->TableSize("train"), 5u);
  EXPECT_TRUE((*txn)->Commit("nothing").status().IsInvalidArgument());
}

TEST(TransactionTest, TheLockHoldsAcrossSpellingsOfThePath) {
  std::string dir = MakeStore(3);
  auto first = Transaction::Begin(dir);
  ASSERT_TRUE(first.ok());
  for (const std::string& other : {dir + "/.", dir + "/", dir + "/../store"}) {
    auto second = Transaction::Begin(other);
    ASSERT_FALSE(second.ok()) << other;
    EXPECT_TRUE(second.status().IsBusy()) << second.status().ToString();
  }
  // The refused attempts did not release the first writer's lock.
  EXPECT_TRUE(Transaction::Begin(dir).status().IsBusy());
  std::vector<uint64_t> ids{0};
  ASSERT_TRUE((*first)->Remove("train", ids).ok());
  EXPECT_TRUE((*first)->Commit("first").ok());
}

TEST(TransactionTest, CommitRefusesWhenCurrentMovedUnderIt) {
  std::string dir = MakeStore(3);
  auto txn = Transaction::Begin(dir);
  ASSERT_TRUE(txn.ok());
  // Someone bypassed the lock and committed generation 2.
  ASSERT_TRUE(WriteManifest(Env::Default(), dir,
                            [&] {
                              auto m = *ReadManifest(Env::Default(), dir, 1);
                              m.generation = 2;
                              m.parent = 1;
                              return m;
                            }())
                  .ok());
  ASSERT_TRUE(WriteCurrent(Env::Default(), dir, 2).ok());
  std::vector<uint64_t> ids{0};
  ASSERT_TRUE((*txn)->Remove("train", ids).ok());
  auto gen = (*txn)->Commit("late");
  ASSERT_FALSE(gen.ok());
  EXPECT_TRUE(gen.status().IsBusy());
  EXPECT_EQ((*(*Snapshot::Open(dir))->table("train"))->size(), 3u);
}

TEST(TransactionTest, NotesThatAreNotUtf8AreStoredReplaced) {
  std::string dir = MakeStore(3);
  auto txn = Transaction::Begin(dir);
  std::vector<uint64_t> ids{0};
  ASSERT_TRUE((*txn)->Remove("train", ids).ok());
  auto gen = (*txn)->Commit("bad \xff byte");
  ASSERT_TRUE(gen.ok()) << gen.status().ToString();
  auto snap = Snapshot::Open(dir);
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ((*snap)->manifest().note.substr(0, 4), "bad ");
}

TEST(TransactionTest, TableNamesAreValidated) {
  std::string dir = MakeStore(1);
  auto txn = Transaction::Begin(dir);
  EXPECT_TRUE((*txn)->CreateTable("bad-name", ImageSchema()).IsInvalidArgument());
  EXPECT_TRUE((*txn)->CreateTable("", ImageSchema()).IsInvalidArgument());
  EXPECT_EQ((*txn)->CreateTable("train", ImageSchema()).code(), Status::Code::kAlreadyExists);
  TableSchema zero = ImageSchema();
  zero.feature_shape = {0};
  EXPECT_TRUE((*txn)->CreateTable("zero", zero).IsInvalidArgument());
}

}  // namespace
}  // namespace cohort::store
