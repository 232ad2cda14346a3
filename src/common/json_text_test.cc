#include "common/json_text.h"

#include <gtest/gtest.h>

namespace cohort {
namespace {

TEST(JsonTextTest, FieldsOfTheWrongTypeReadAsAbsent) {
  auto j = nlohmann::json::parse(R"({"n": 2.5, "i": 3, "s": "x", "null": null, "a": [1]})");
  EXPECT_EQ(JsonNumberField(j, "n"), 2.5);
  EXPECT_EQ(JsonNumberField(j, "i"), 3.0);
  EXPECT_FALSE(JsonNumberField(j, "s").has_value());
  EXPECT_FALSE(JsonNumberField(j, "null").has_value());
  EXPECT_FALSE(JsonNumberField(j, "missing").has_value());
  EXPECT_EQ(JsonStringField(j, "s"), "x");
  EXPECT_EQ(JsonStringField(j, "n", "fallback"), "fallback");
  EXPECT_EQ(JsonStringField(j, "a"), "");
  for (const char* text : {"[1, 2]", "7", "null", "\"text\""}) {
    auto not_object = nlohmann::json::parse(text);
    EXPECT_FALSE(JsonNumberField(not_object, "n").has_value()) << text;
    EXPECT_EQ(JsonStringField(not_object, "s", "none"), "none") << text;
  }
}

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
