#include "common/row_sample.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace cohort {
namespace {

TEST(SampleRowsTest, DrawsNDistinctRowsInIncreasingOrderFromTheSeed) {
  const std::vector<uint64_t> rows = SampleRows(1000, 50, 7);
  ASSERT_EQ(rows.size(), 50U);
  EXPECT_TRUE(std::is_sorted(rows.begin(), rows.end()));
  EXPECT_EQ(std::adjacent_find(rows.begin(), rows.end()), rows.end());
  EXPECT_LT(rows.back(), 1000U);
  EXPECT_EQ(rows, SampleRows(1000, 50, 7));
  EXPECT_NE(rows, SampleRows(1000, 50, 8));
  // tests/loop_test.py draws the same rows with a Python splitmix64 (PoolSample).
}

TEST(SampleRowsTest, EveryRowWhenNReachesTheTotalAndNoneFromNothing) {
  EXPECT_EQ(SampleRows(5, 5, 1), (std::vector<uint64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(SampleRows(5, 9, 1), (std::vector<uint64_t>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(SampleRows(0, 3, 1).empty());
  EXPECT_TRUE(SampleRows(100, 0, 1).empty());
}

TEST(SampleRowsTest, EachRowIsEquallyLikely) {
  // 4,000 draws of 10 from 40: every row is taken 1,000 times in expectation (sd ~27).
  std::vector<int> count(40, 0);
  for (uint64_t seed = 0; seed < 4000; seed++) {
    for (uint64_t row : SampleRows(40, 10, seed)) count[row]++;
  }
  for (size_t row = 0; row < count.size(); ++row) {
    EXPECT_GT(count[row], 880) << row;
    EXPECT_LT(count[row], 1120) << row;
  }
}

}  // namespace
}  // namespace cohort
