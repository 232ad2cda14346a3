#include "model/batch_pipeline.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "store/store.h"
#include "store/transaction.h"

namespace cohort::model {
namespace {

// A table of n rows whose 3 uint8 features and int64 label all encode the row number.
std::shared_ptr<const store::Snapshot> CountingTable(uint64_t n) {
  const char* root = std::getenv("COHORT_TEST_TMP");
  auto dir = std::filesystem::path(root != nullptr ? root : ::testing::TempDir()) /
             ("batch_pipeline_test." + std::to_string(::getpid()) + "." + std::to_string(n));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir.parent_path());
  EXPECT_TRUE(store::InitStore(dir.string()).ok());
  auto txn = store::Transaction::Begin(dir.string());
  store::TableSchema s;
  s.feature_dtype = store::Dtype::kUint8;
  s.feature_shape = {3};
  EXPECT_TRUE((*txn)->CreateTable("t", s).ok());
  store::HostArray x(store::Dtype::kUint8, {n, 3});
  store::HostArray y(store::Dtype::kInt64, {n});
  for (uint64_t i = 0; i < n; i++) {
    for (int j = 0; j < 3; j++) x.as<uint8_t>()[i * 3 + j] = static_cast<uint8_t>(i + j);
    y.as<int64_t>()[i] = static_cast<int64_t>(i);
  }
  EXPECT_TRUE((*txn)->Append("t", x, &y).ok());
  EXPECT_TRUE((*txn)->Commit("counting").ok());
  return *store::Snapshot::Open(dir.string());
}

TEST(BatchPipelineTest, DeliversEveryRowInOrderWithAShortLastBatch) {
  auto snap = CountingTable(103);
  const store::Table& t = **snap->table("t");
  BatchPipeline p(t, /*with_labels=*/true, 10);
  for (int pass = 0; pass < 3; pass++) {
    std::vector<uint64_t> order;
    for (uint64_t i = 0; i < 103; i++) order.push_back((i * 37 + pass) % 103);
    p.Start(order);
    EXPECT_EQ(p.batches(), 11);
    size_t seen = 0;
    for (int64_t b = 0;; b++) {
      auto batch = p.Next();
      ASSERT_TRUE(batch.ok());
      if (!*batch) break;
      EXPECT_EQ((*batch)->index, b);
      EXPECT_EQ((*batch)->size, b < 10 ? 10 : 3);
      for (int64_t i = 0; i < (*batch)->size; i++) {
        uint64_t row = order[seen++];
        EXPECT_EQ(static_cast<uint8_t>((*batch)->features[i * 3 + 2]),
                  static_cast<uint8_t>(row + 2));
        int64_t label;
        std::memcpy(&label, (*batch)->labels + i * 8, 8);
        EXPECT_EQ(label, static_cast<int64_t>(row));
      }
    }
    EXPECT_EQ(seen, 103u);
    auto after = p.Next();
    ASSERT_TRUE(after.ok());
    EXPECT_FALSE(after->has_value());
  }
}

TEST(BatchPipelineTest, RestartingMidPassAndOutOfRangeRows) {
  auto snap = CountingTable(50);
  const store::Table& t = **snap->table("t");
  BatchPipeline p(t, /*with_labels=*/false, 8);
  std::vector<uint64_t> all(50);
  for (uint64_t i = 0; i < 50; i++) all[i] = i;
  p.Start(all);
  ASSERT_TRUE(p.Next().ok());  // abandon the pass after one batch
  p.Start({49, 48});
  auto b = p.Next();
  ASSERT_TRUE(b.ok() && b->has_value());
  EXPECT_EQ((*b)->size, 2);
  EXPECT_EQ((*b)->labels, nullptr);
  EXPECT_EQ(static_cast<uint8_t>((*b)->features[0]), 49);
  p.Start({1, 2, 50});
  auto bad = p.Next();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("out of range"), std::string::npos);
  p.Start({});
  auto empty = p.Next();
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(empty->has_value());
}

}  // namespace
}  // namespace cohort::model
