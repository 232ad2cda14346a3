#include "worker/command.h"

#include <gtest/gtest.h>

namespace cohort::worker {
namespace {

TEST(ParseCommandLine, WellFormed) {
  ParsedCommand p = ParseCommandLine(R"({"op":"train","id":7,"version":1,"table":"train"})");
  EXPECT_EQ(p.error, "");
  EXPECT_EQ(p.op, "train");
  EXPECT_EQ(p.id, 7);
  EXPECT_EQ(p.command["table"], "train");
}

TEST(ParseCommandLine, Malformed) {
  EXPECT_EQ(ParseCommandLine("[1]").error, "malformed command: expected a JSON object, got [1]");
  EXPECT_NE(ParseCommandLine("{").error.find("malformed command: parse error"), std::string::npos);
  ParsedCommand p = ParseCommandLine(R"({"id":"a","op":3})");
  EXPECT_EQ(p.error, "malformed command: \"op\" must be a string, got 3");
  EXPECT_EQ(p.id, "a");  // the error event still names the command
  EXPECT_EQ(ParseCommandLine(R"({"id":[1],"op":"x"})").error,
            "malformed command: \"id\" must be a string or a number, got [1]");
  p = ParseCommandLine(R"({"op":"predict","version":2})");
  EXPECT_EQ(p.op, "predict");
  EXPECT_EQ(p.error, "protocol version 2 is not supported (this worker speaks 1)");
}

// Found by fuzz/worker_command_fuzz.cc: a number beyond double made nlohmann throw
// out_of_range, not parse_error; it escaped, and the worker answered "internal error while
// reading a command" and stopped serving.
TEST(ParseCommandLine, NumberOverflowIsMalformed) {
  EXPECT_EQ(ParseCommandLine("5555e5555~io[\":{\x93" "e\",55d\":5,\x0bo)\":nept\"}").error,
            "malformed command: number overflow parsing '5555e5555'");
  ParsedCommand p = ParseCommandLine(R"({"op":"train","id":1,"epochs":1e400})");
  EXPECT_EQ(p.error, "malformed command: number overflow parsing '1e400'");
}

TEST(CommandFields, ReadsAndRefuses) {
  nlohmann::json cmd = nlohmann::json::parse(
      R"({"store":"/s","generation":3,"device":{"device":"cuda:1","threads":2}})");
  CommandFields f(cmd, "predict");
  EXPECT_EQ(*f.String("store"), "/s");
  EXPECT_EQ(*f.Generation(), 3u);
  model::DeviceConfig d = *f.Device(model::DeviceConfig{});
  EXPECT_EQ(d.device, "cuda:1");
  EXPECT_EQ(d.threads, 2);
  EXPECT_EQ(f.String("out").status().message(), "predict: missing field \"out\"");

  nlohmann::json bad = nlohmann::json::parse(R"({"generation":-1,"device":{"threads":0}})");
  CommandFields g(bad, "train");
  EXPECT_FALSE(g.Generation().ok());
  EXPECT_FALSE(g.Device(model::DeviceConfig{}).ok());
}

}  // namespace
}  // namespace cohort::worker
