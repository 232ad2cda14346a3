#include "common/time_text.h"

#include <gtest/gtest.h>

#include <regex>

namespace cohort {
namespace {

TEST(TimeTextTest, NowIso8601IsUtcWithMilliseconds) {
  std::string a = NowIso8601();
  EXPECT_TRUE(std::regex_match(a, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)"))) << a;
  // Text order is time order, which the journal relies on.
  EXPECT_LE(a, NowIso8601());
}

}  // namespace
}  // namespace cohort
