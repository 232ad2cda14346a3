#include "common/json_text.h"

#include <gtest/gtest.h>

namespace cohort {
namespace {

TEST(JsonTextTest, ShortValuesAreShownWhole) {
  EXPECT_EQ(JsonForMessage(nlohmann::json("ten")), "\"ten\"");
  EXPECT_EQ(JsonForMessage(nlohmann::json::parse(R"({"a":[1,2]})")), R"({"a":[1,2]})");
}

TEST(JsonTextTest, LongValuesAreCutAndLinesJoined) {
  std::string shown = JsonForMessage(nlohmann::json(std::string(200, 'x')), 20);
  EXPECT_EQ(shown.size(), 20u);
  EXPECT_EQ(shown.substr(17), "...");
  EXPECT_EQ(JsonForMessage(nlohmann::json("a\nb")).find('\n'), std::string::npos);
}

TEST(JsonTextTest, DeepNestingIsDescribedNotDumped) {
  nlohmann::json v = 1;
  for (int i = 0; i < 10000; i++) v = nlohmann::json::array({v});
  EXPECT_EQ(JsonForMessage(v), "a deeply nested array");
  EXPECT_TRUE(JsonNestsDeeperThan(v, 8));
  EXPECT_FALSE(JsonNestsDeeperThan(nlohmann::json::array({1, 2}), 8));
}

}  // namespace
}  // namespace cohort
