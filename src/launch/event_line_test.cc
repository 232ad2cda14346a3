// ParseEventLine: which stdout lines are events (docs/protocol.md, "Framing").
#include <gtest/gtest.h>

#include "launch/subprocess.h"

namespace cohort::launch {
namespace {

TEST(ParseEventLine, EventsAndLog) {
  auto e = ParseEventLine(R"(@cohort {"ev":"hello","version":1})");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)["ev"], "hello");
  EXPECT_TRUE(ParseEventLine("@cohort {\"ev\":\"bye\"}\r").has_value());  // CRLF output
  EXPECT_FALSE(ParseEventLine("epoch 1 loss 0.5").has_value());
  EXPECT_FALSE(ParseEventLine("@cohort [1,2]").has_value());    // not an object
  EXPECT_FALSE(ParseEventLine("@cohort {\"ev\":").has_value());  // not JSON
  EXPECT_FALSE(ParseEventLine("@cohort").has_value());
  EXPECT_FALSE(ParseEventLine("").has_value());
  EXPECT_FALSE(ParseEventLine(" @cohort {}").has_value());
}

}  // namespace
}  // namespace cohort::launch
