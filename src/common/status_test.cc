#include "common/status.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace cohort {
namespace {

Result<int> ParsePositive(int v) {
  if (v <= 0) return Status::InvalidArgument("value " + std::to_string(v) + " is not positive");
  return v;
}

Result<int> Doubled(int v) {
  COHORT_ASSIGN_OR_RETURN(int x, ParsePositive(v));
  return 2 * x;
}

TEST(StatusTest, OkAndErrors) {
  EXPECT_TRUE(Status::OK().ok());
  Status s = Status::Corruption("a.npy: bad magic");
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_EQ(s.ToString(), "corruption: a.npy: bad magic");
  EXPECT_EQ(s.WithContext("store x").message(), "store x: a.npy: bad magic");
}

TEST(StatusTest, FromErrnoMapsMissingFileToNotFound) {
  EXPECT_TRUE(Status::FromErrno("open f", ENOENT).IsNotFound());
  Status io = Status::FromErrno("write f", EIO);
  EXPECT_EQ(io.code(), Status::Code::kIOError);
  EXPECT_NE(io.message().find("write f"), std::string::npos);
}

TEST(ResultTest, PropagatesErrorsAndValues) {
  auto good = Doubled(21);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 42);
  auto bad = Doubled(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "value -1 is not positive");
}

}  // namespace
}  // namespace cohort
