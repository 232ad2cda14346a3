// Resident tables follow the store commit by commit, uploading only the segments they lack.
// Run on the CPU (COHORT_RESIDENT_DATA semantics do not depend on the device); the GPU check
// (bench/gpu_check.sh) runs the same code on CUDA.
#include "model/device_table.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "store/store.h"
#include "store/test_util.h"
#include "store/transaction.h"

namespace cohort::model {
namespace {

using store::testing::ClassLabels;
using store::testing::ScratchDir;
using store::testing::Uint8Features;

std::shared_ptr<const store::Snapshot> Open(const std::string& dir) {
  auto snap = store::Snapshot::Open(dir);
  EXPECT_TRUE(snap.ok()) << snap.status().ToString();
  return *snap;
}

// A store at `dir` whose table "t" holds `rows` samples (uint8 features (2, 3), class labels).
void MakeStore(const std::string& dir, uint64_t rows) {
  ASSERT_TRUE(store::InitStore(dir).ok());
  auto txn = store::Transaction::Begin(dir);
  store::TableSchema s;
  s.feature_dtype = store::Dtype::kUint8;
  s.feature_shape = {2, 3};
  ASSERT_TRUE((*txn)->CreateTable("t", s).ok());
  auto labels = ClassLabels(rows);
  ASSERT_TRUE((*txn)->Append("t", Uint8Features(rows), &labels).ok());
  ASSERT_TRUE((*txn)->Commit("first").ok());
}

// Every live row of the view holds the table's features and label bytes.
void ExpectViewHoldsTable(const ResidentView& view, const store::Table& table) {
  ASSERT_EQ(view.live.size(0), static_cast<int64_t>(table.size()));
  const size_t fbytes = table.schema().feature_row_bytes();
  const size_t lbytes = table.schema().label_row_bytes();
  torch::Tensor x = view.features.index_select(0, view.live).contiguous();
  torch::Tensor y = view.labels.index_select(0, view.live).contiguous();
  for (uint64_t row = 0; row < table.size(); row++) {
    ASSERT_EQ(std::memcmp(static_cast<const std::byte*>(x.data_ptr()) + row * fbytes,
                          table.features(row), fbytes),
              0)
        << "features of row " << row;
    ASSERT_EQ(std::memcmp(static_cast<const std::byte*>(y.data_ptr()) + row * lbytes,
                          table.label(row), lbytes),
              0)
        << "label of row " << row;
  }
}

TEST(ResidentTableTest, UploadsEachSegmentOnceAndFollowsEveryCommit) {
  ClearResidentTables();
  const std::string dir = ScratchDir("store");
  ASSERT_NO_FATAL_FAILURE(MakeStore(dir, 300));
  auto resident = [&](uint64_t expect_uploaded) {
    const uint64_t before = ResidentRowsUploaded();
    auto snap = Open(dir);
    const store::Table* table = *snap->table("t");
    auto view = ResidentTable(dir, *table, torch::kCPU);
    EXPECT_TRUE(view.ok()) << view.status().ToString();
    EXPECT_EQ(ResidentRowsUploaded() - before, expect_uploaded);
    ExpectViewHoldsTable(*view, *table);
    return *view;
  };
  resident(300);
  resident(0);  // nothing changed: nothing crosses

  // A commit that adds rows adds a segment: only it is uploaded.
  {
    auto txn = store::Transaction::Begin(dir);
    auto labels = ClassLabels(50, 7);
    ASSERT_TRUE((*txn)->Append("t", Uint8Features(50, 100), &labels).ok());
    ASSERT_TRUE((*txn)->Commit("more").ok());
  }
  EXPECT_EQ(resident(50).features.size(0), 350);

  // A relabel writes the relabelled rows as a new segment.
  auto ids = [&] { return Open(dir)->table("t").value()->Ids(); }();
  {
    auto txn = store::Transaction::Begin(dir);
    std::vector<uint64_t> some(ids.begin(), ids.begin() + 5);
    store::HostArray labels(store::Dtype::kInt64, {5});
    for (int i = 0; i < 5; i++) labels.as<int64_t>()[i] = 9;
    ASSERT_TRUE((*txn)->Relabel("t", some, labels).ok());
    ASSERT_TRUE((*txn)->Commit("relabel").ok());
  }
  EXPECT_EQ(resident(5).features.size(0), 355);

  // Once the first segment is dead, the copy drops it without uploading anything.
  {
    auto txn = store::Transaction::Begin(dir);
    std::vector<uint64_t> rest(ids.begin() + 5, ids.begin() + 300);
    ASSERT_TRUE((*txn)->Remove("t", rest).ok());
    ASSERT_TRUE((*txn)->Commit("remove").ok());
  }
  EXPECT_EQ(resident(0).features.size(0), 55);
}

TEST(ResidentTableTest, ModeComesFromTheEnvironment) {
  const std::string dir = ScratchDir("store");
  ASSERT_NO_FATAL_FAILURE(MakeStore(dir, 10));
  auto snap = Open(dir);
  const store::Table& table = **snap->table("t");
  ::setenv("COHORT_RESIDENT_DATA", "sometimes", 1);
  auto bad = ResidentModeFromEnv();
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "COHORT_RESIDENT_DATA='sometimes': expected auto, on or off");
  ::unsetenv("COHORT_RESIDENT_DATA");
  ASSERT_TRUE(ResidentModeFromEnv().ok());
  EXPECT_EQ(*ResidentModeFromEnv(), ResidentMode::kAuto);
  // auto: a GPU only; on: any device unless the pass augments; off: never.
  EXPECT_FALSE(UseResidentTable(ResidentMode::kAuto, table, torch::kCPU, false));
  EXPECT_TRUE(UseResidentTable(ResidentMode::kOn, table, torch::kCPU, false));
  EXPECT_FALSE(UseResidentTable(ResidentMode::kOn, table, torch::kCPU, true));
  EXPECT_FALSE(UseResidentTable(ResidentMode::kOff, table, torch::kCPU, false));
}

}  // namespace
}  // namespace cohort::model
