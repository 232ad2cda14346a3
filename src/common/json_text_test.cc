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

// Deep values are built as text and parsed, never by copying json values into one another:
// that recursion alone overflows the stack under AddressSanitizer at a few thousand levels.
std::string Nested(int depth, const char* open = "[", const char* close = "]") {
  std::string s;
  for (int i = 0; i < depth; i++) s += open;
  s += "1";
  for (int i = 0; i < depth; i++) s += close;
  return s;
}

TEST(JsonTextTest, DeepNestingIsDescribedNotDumped) {
  auto v = ParseJsonBounded(Nested(40));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(JsonForMessage(*v), "a deeply nested array");
  EXPECT_TRUE(JsonNestsDeeperThan(*v, 8));
  EXPECT_FALSE(JsonNestsDeeperThan(nlohmann::json::array({1, 2}), 8));
}

TEST(JsonTextTest, TooDeepTextIsRefusedBeforeParsing) {
  // 300,000 levels, as a hostile member printed them: refused from the text alone.
  std::string deep = "{\"ev\":\"done\",\"metrics\":";
  for (int i = 0; i < 300000; i++) deep += "{\"a\":";
  deep += "1";
  deep += std::string(300000, '}');
  deep += "}";
  auto r = ParseJsonBounded(deep);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "JSON nested deeper than 64 levels");
  EXPECT_FALSE(ParseJsonBounded(Nested(300000)).ok());
  // The limit is inclusive; brackets inside strings do not count.
  EXPECT_TRUE(ParseJsonBounded(Nested(kMaxJsonDepth)).ok());
  EXPECT_FALSE(ParseJsonBounded(Nested(kMaxJsonDepth + 1)).ok());
  auto s = ParseJsonBounded("{\"s\": \"" + std::string(1000, '[') + "\\\"{\"}");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)["s"].get<std::string>().size(), 1002u);
  EXPECT_FALSE(JsonTextNestsDeeperThan("\"\\\"[[[\"", 1));
  EXPECT_EQ(ParseJsonBounded("{\"a\":").status().message(), "not valid JSON");
}

TEST(JsonTextTest, IntegersAreReadOnlyWhenTheyAreIntegersInRange) {
  using nlohmann::json;
  EXPECT_EQ(JsonUint(json(7)), 7u);
  EXPECT_EQ(JsonUint(json(UINT64_MAX)), UINT64_MAX);
  EXPECT_EQ(JsonUint(json(4294967295ULL), UINT32_MAX), 4294967295u);
  EXPECT_EQ(JsonInt(json(-5)), -5);
  EXPECT_EQ(JsonInt(json(INT64_MIN)), INT64_MIN);
  for (const json& bad : {json(4294967296ULL), json(-1), json(1.0), json(3.3887e19), json("7"),
                          json(nullptr), json::array({1})}) {
    EXPECT_THROW(JsonUint(bad, UINT32_MAX), json::type_error) << bad.dump();
  }
  for (const json& bad : {json(UINT64_MAX), json(-1.0), json(1e300), json(true)}) {
    EXPECT_THROW(JsonInt(bad), json::type_error) << bad.dump();
  }
  EXPECT_THROW(JsonInt(json(-3), 0), json::type_error);
  try {
    JsonUint(json(2.5), 10);
    FAIL() << "2.5 was read as an integer";
  } catch (const json::type_error& e) {
    EXPECT_NE(std::string(e.what()).find("2.5 is not an integer in [0, 10]"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(JsonUintArray(json::array({1, 2, 3})), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(JsonIntArray(json::array({-1, 2}), -1), (std::vector<int64_t>{-1, 2}));
  EXPECT_THROW(JsonUintArray(json::array({1, -2})), json::type_error);
  EXPECT_THROW(JsonIntArray(json::array({1, 2.5})), json::type_error);
  EXPECT_THROW(JsonUintArray(json(3)), json::type_error);
}

}  // namespace
}  // namespace cohort
