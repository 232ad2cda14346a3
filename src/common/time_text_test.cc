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

TEST(TimeTextTest, ParseIso8601ReadsWhatNowWrites) {
  auto t = ParseIso8601("2024-05-01T12:34:56.789Z");
  ASSERT_TRUE(t.has_value());
  EXPECT_DOUBLE_EQ(*t, 1714566896.789);
  EXPECT_DOUBLE_EQ(*ParseIso8601("1970-01-01T00:00:01Z"), 1.0);
  EXPECT_DOUBLE_EQ(*ParseIso8601("1970-01-01T00:00:00.5Z"), 0.5);
  auto now = ParseIso8601(NowIso8601());
  ASSERT_TRUE(now.has_value());
  EXPECT_GT(*now, 1.7e9);
  for (const char* bad :
       {"", "2024-05-01", "2024-05-01T12:34:56", "2024-05-01T12:34:56.Z", "2024-13-01T12:34:56Z",
        "2024-05-01T12:34:56Zx", "x024-05-01T12:34:56Z"}) {
    EXPECT_FALSE(ParseIso8601(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace cohort
