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
