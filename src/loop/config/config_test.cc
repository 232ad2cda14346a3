#include "loop/config/config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>

#include "loop/acquire/strategy.h"

namespace cohort::loop {
namespace {

namespace fs = std::filesystem;

// A complete config; tests replace parts of it.
const char* kFull = R"(name = "demo"
devices = ["cpu:0", "cpu:1"]
threads_per_cpu_device = 2
members_per_device = 1
launcher = "local"

[store]
source = "../data/store"
generation = 3
train = "labelled"

[defaults]
epochs = 3
batch_size = 32
optimizer = { name = "sgd", learning_rate = 0.05 }
warm_start = true

[[member]]
name = "a"
model = "dense 64 relu, dense 10"
seed = 1

[[member]]
name = "b"
model = "dense 32 tanh, dropout 0.1, dense 10"
seed = 2
epochs = 7
warm_start = false
optimizer = { learning_rate = 0.01 }

[acquisition]
strategy = "entropy"
batch_size = 100

[stop]
max_rounds = 4
target = { metric = "nll", value = 0.3 }
)";

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// The error for `text`, checked to be one line.
std::string Error(const std::string& text) {
  auto c = ParseLoopConfig(text, "dir/loop.toml", "/base");
  EXPECT_FALSE(c.ok());
  if (c.ok()) return "";
  const std::string& m = c.status().message();
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  return m;
}

TEST(LoopConfigTest, FullConfigWithDefaults) {
  auto c = ParseLoopConfig(kFull, "dir/loop.toml", "/base/dir");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->path, "dir/loop.toml");
  EXPECT_EQ(c->name, "demo");
  EXPECT_EQ(c->run_dir, "/base/dir/runs/demo");
  EXPECT_EQ(c->store.source, "/base/data/store");
  ASSERT_TRUE(c->store.source_generation.has_value());
  EXPECT_EQ(*c->store.source_generation, 3u);
  EXPECT_EQ(c->store.train, "labelled");
  EXPECT_EQ(c->store.pool, "pool");
  EXPECT_EQ(c->store.test, "test");
  EXPECT_FALSE(c->devices_auto);
  ASSERT_EQ(c->devices.size(), 2u);
  EXPECT_EQ(c->devices[1].ToString(), "cpu:1");
  EXPECT_EQ(c->threads_per_cpu_device, 2);
  EXPECT_EQ(c->members_per_device, 1);
  EXPECT_EQ(c->launcher, Launcher::kLocal);

  ASSERT_EQ(c->members.size(), 2u);
  const auto& a = c->members[0];
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(a.train.member, "a");
  EXPECT_EQ(a.train.model, "dense 64 relu, dense 10");
  EXPECT_EQ(a.train.seed, 1u);
  EXPECT_EQ(a.train.epochs, 3);
  EXPECT_EQ(a.train.batch_size, 32);
  EXPECT_EQ(a.train.optimizer.name, "sgd");
  EXPECT_DOUBLE_EQ(a.train.optimizer.learning_rate, 0.05);
  EXPECT_TRUE(a.warm_start);
  EXPECT_EQ(a.line, 18);
  const auto& b = c->members[1];
  EXPECT_EQ(b.train.epochs, 7);
  EXPECT_EQ(b.train.optimizer.name, "sgd");  // kept from [defaults]
  EXPECT_DOUBLE_EQ(b.train.optimizer.learning_rate, 0.01);
  EXPECT_FALSE(b.warm_start);
  EXPECT_EQ(b.train.loss, "auto");  // TrainConfig's own default

  EXPECT_EQ(c->acquisition.strategy, "entropy");
  EXPECT_EQ(c->acquisition.batch_size, 100);
  EXPECT_EQ(c->acquisition.seed, 0u);
  EXPECT_EQ(c->oracle.kind, OracleConfig::Kind::kHiddenLabels);
  EXPECT_TRUE(c->oracle.command.empty());
  EXPECT_EQ(c->stop.max_rounds, 4);
  EXPECT_FALSE(c->stop.label_budget.has_value());
  ASSERT_TRUE(c->stop.target.has_value());
  EXPECT_EQ(c->stop.target->metric, "nll");
  EXPECT_DOUBLE_EQ(c->stop.target->value, 0.3);
  EXPECT_FALSE(c->stop.target->higher_is_better);
  EXPECT_TRUE(c->stop.stop_when_pool_exhausted);
  EXPECT_EQ(c->failure.retries, 2);
  EXPECT_EQ(c->failure.min_members, 2);
  EXPECT_DOUBLE_EQ(c->failure.heartbeat_timeout_s, 60);
  EXPECT_DOUBLE_EQ(c->failure.attempt_timeout_s, 0);

  // The JSON form is stable, and a config equals itself for resume.
  auto again = ParseLoopConfig(kFull, "dir/loop.toml", "/base/dir");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(LoopConfigToJson(*c), LoopConfigToJson(*again));
  EXPECT_EQ(LoopConfigFingerprint(*c), LoopConfigFingerprint(*again));
  EXPECT_EQ(LoopConfigFingerprint(*c).size(), 32u);
  EXPECT_TRUE(DiffLoopConfigs(*c, *again).empty());
}

TEST(LoopConfigTest, OptionalParts) {
  std::string text = Replace(kFull, "devices = [\"cpu:0\", \"cpu:1\"]",
                             "devices = \"auto\"\nrun_dir = \"/tmp/elsewhere/../r\"");
  text += R"(label_budget = 500
stop_when_pool_exhausted = false

[oracle]
kind = "command"
command = ["./label.sh", "--fast"]

[failure]
retries = 0
min_members = 1
heartbeat_timeout_s = 5.5
attempt_timeout_s = 600
)";
  auto c = ParseLoopConfig(text, "loop.toml", "/cfg");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->devices_auto);
  EXPECT_TRUE(c->devices.empty());
  EXPECT_EQ(c->run_dir, "/tmp/r");
  EXPECT_EQ(c->stop.label_budget, 500);
  EXPECT_FALSE(c->stop.stop_when_pool_exhausted);
  EXPECT_EQ(c->oracle.kind, OracleConfig::Kind::kCommand);
  ASSERT_EQ(c->oracle.command.size(), 2u);
  EXPECT_EQ(c->oracle.command[0], "/cfg/label.sh");
  EXPECT_EQ(c->oracle.command[1], "--fast");
  EXPECT_EQ(c->failure.retries, 0);
  EXPECT_EQ(c->failure.min_members, 1);
  EXPECT_DOUBLE_EQ(c->failure.heartbeat_timeout_s, 5.5);
  EXPECT_DOUBLE_EQ(c->failure.attempt_timeout_s, 600);
}

TEST(LoopConfigTest, ExampleParses) {
  const fs::path example = fs::path(COHORT_SOURCE_DIR) / "examples/fashion-mnist/loop.toml";
  auto c = LoadLoopConfig(example.string());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->members.size(), 8u);
  EXPECT_EQ(c->devices.size(), 2u);
  EXPECT_EQ(c->acquisition.strategy, "bald");
  EXPECT_EQ(c->acquisition.batch_size, 1000);
  EXPECT_EQ(c->oracle.kind, OracleConfig::Kind::kHiddenLabels);
  EXPECT_EQ(c->stop.max_rounds, 5);
  EXPECT_EQ(c->store.source, (example.parent_path() / "store").lexically_normal().string());
  EXPECT_EQ(c->run_dir,
            (example.parent_path() / "runs" / "fashion-mnist-bald").lexically_normal().string());
  int cnns = 0;
  for (const auto& m : c->members) cnns += m.train.model.find("conv2d") != std::string::npos;
  EXPECT_GE(cnns, 2);
  EXPECT_EQ(c->members[3].train.optimizer.name, "adamw");
  EXPECT_EQ(c->members[0].train.optimizer.name, "adam");
}

TEST(LoopConfigTest, CnnEnsembleExampleParses) {
  const fs::path example = fs::path(COHORT_SOURCE_DIR) / "examples/fashion-mnist/cnn-ensemble.toml";
  auto c = LoadLoopConfig(example.string());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->members.size(), 8u);
  std::set<std::string> models;
  int augmented = 0;
  for (const auto& m : c->members) {
    EXPECT_NE(m.train.model.find("conv2d"), std::string::npos) << m.name;
    EXPECT_EQ(m.train.schedule.name, "cosine") << m.name;
    models.insert(m.train.model);
    augmented += m.train.augment.enabled();
  }
  // The members differ on purpose (the file says why): no two share a model, some augment.
  EXPECT_EQ(models.size(), 8u);
  EXPECT_GT(augmented, 0);
  EXPECT_LT(augmented, 8);
}

TEST(LoopConfigTest, MissingFile) {
  auto c = LoadLoopConfig("/nonexistent/loop.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(c.status().IsNotFound());
  EXPECT_NE(c.status().message().find("/nonexistent/loop.toml"), std::string::npos);
}

TEST(LoopConfigTest, SyntaxError) {
  std::string m = Error(Replace(kFull, "batch_size = 100", "batch_size = "));
  EXPECT_EQ(m.rfind("dir/loop.toml:33: syntax: ", 0), 0u) << m;
}

// Found by the loop_config fuzzer in CI: an invalid UTF-8 byte inside a multi-line literal
// string made toml11 read past its buffer (fuzz/findings/loop_config-asan-toml11-ml-literal).
// Invalid UTF-8 anywhere is refused before the parser sees it, with its line and column.
TEST(LoopConfigTest, InvalidUtf8IsRefusedWithItsLineAndColumn) {
  const std::string full = kFull;
  const int line = static_cast<int>(std::count(full.begin(), full.end(), '\n')) + 2;
  EXPECT_EQ(Error(full + "\nnote = \'\'\'ab\x99"
                         "c\'\'\'\n"),
            "dir/loop.toml:" + std::to_string(line) +
                ": syntax: not valid UTF-8 (byte 0x99 at column 13); a TOML file is UTF-8");
  for (const char* bad : {"\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xE2\x82", "\xFF"}) {
    EXPECT_NE(Error(full + "\n# " + bad + "\n").find("not valid UTF-8"), std::string::npos) << bad;
  }
  // Well-formed multi-byte text (in a comment and a string) is fine.
  auto c = ParseLoopConfig(full + "\n# caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x99\x82\n",
                           "dir/loop.toml", "/base");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
}

TEST(LoopConfigTest, TooDeepNestingIsRefusedWithItsLine) {
  // An array nested 100,000 deep once crashed the TOML parser (stack overflow).
  std::string deep = "# a comment with [[[[ brackets\nnote = \"[[[{{{\"\nx = \'\'\'\n[[[\'\'\'\n" +
                     std::string("y = ") + std::string(100000, '[') + std::string(100000, ']');
  const std::string full = kFull;
  std::string m = Error(full + "\n" + deep);
  const int line = static_cast<int>(std::count(full.begin(), full.end(), '\n')) + 6;
  EXPECT_EQ(m, "dir/loop.toml:" + std::to_string(line) +
                   ": syntax: keys, arrays or inline tables nested deeper than 64 levels")
      << m;
  EXPECT_NE(Error(full + "\nz = {a = " + std::string(100000, '{')).find("nested deeper"),
            std::string::npos);
  for (const char* sep : {".", " . "}) {
    std::string key;
    for (int i = 0; i < 100000; i++) key += (i > 0 ? sep : "") + std::string("a");
    EXPECT_NE(Error(full + "\n" + key + " = 1").find("nested deeper"), std::string::npos);
    EXPECT_NE(Error(full + "\n[" + key + "]\nb = 1").find("nested deeper"), std::string::npos);
  }
  // 60 levels are parsed (and refused for what they are, not for their depth).
  m = Error(full + "\nmystery = " + std::string(60, '[') + std::string(60, ']'));
  EXPECT_EQ(m.find("nested deeper"), std::string::npos) << m;
}

TEST(LoopConfigTest, UnknownKeySuggestsClosest) {
  EXPECT_EQ(Error(Replace(kFull, "strategy = \"entropy\"", "stratgy = \"entropy\"")),
            "dir/loop.toml:32: acquisition.stratgy: unknown field (did you mean strategy?)");
  EXPECT_EQ(Error(Replace(kFull, "threads_per_cpu_device = 2", "thread_per_cpu_device = 2")),
            "dir/loop.toml:3: thread_per_cpu_device: unknown field (did you mean "
            "threads_per_cpu_device?)");
  // In a member: a loop key, a TrainConfig key, and a nested one (via TrainConfigFromJson).
  EXPECT_EQ(Error(Replace(kFull, "name = \"b\"", "nmae = \"b\"")),
            "dir/loop.toml:24: member[2].nmae: unknown field (did you mean name?)");
  EXPECT_EQ(Error(Replace(kFull, "epochs = 7", "epoch = 7")),
            "dir/loop.toml:27: member[2].epoch: unknown field (did you mean epochs?)");
  EXPECT_EQ(
      Error(Replace(kFull, "optimizer = { learning_rate = 0.01 }", "optimizer = { lr = 0.01 }")),
      "dir/loop.toml:29: member[2].optimizer.lr: unknown field (did you mean "
      "learning_rate?)");
  EXPECT_EQ(Error(Replace(kFull, "epochs = 3", "epohcs = 3")),
            "dir/loop.toml:13: defaults.epohcs: unknown field (did you mean epochs?)");
  EXPECT_EQ(Error(Replace(kFull, "epochs = 7", "device = { threads = 2 }")),
            "dir/loop.toml:27: member[2].device: set by the loop from devices and "
            "threads_per_cpu_device");
}

TEST(LoopConfigTest, WrongType) {
  EXPECT_EQ(Error(Replace(kFull, "batch_size = 100", "batch_size = \"100\"")),
            "dir/loop.toml:33: acquisition.batch_size: expected an integer, got \"100\"");
  EXPECT_EQ(Error(Replace(kFull, "epochs = 7", "epochs = \"7\"")),
            "dir/loop.toml:27: member[2].epochs: expected an integer, got \"7\"");
  EXPECT_EQ(Error(Replace(kFull, "batch_size = 100", "batch_size = 0")),
            "dir/loop.toml:33: acquisition.batch_size: expected an integer >= 1, got 0");
  EXPECT_EQ(Error(Replace(kFull, "[stop]", "[stop]\nstop_when_pool_exhausted = 1")),
            "dir/loop.toml:36: stop.stop_when_pool_exhausted: expected true or false, got 1");
}

TEST(LoopConfigTest, BadDevice) {
  EXPECT_EQ(Error(Replace(kFull, "\"cpu:1\"]", "\"gpu:1\"]")),
            "dir/loop.toml:2: devices[2]: device \"gpu:1\": expected cpu, cpu:N, cuda or cuda:N");
  EXPECT_EQ(Error(Replace(kFull, "\"cpu:1\"]", "\"cpu:0\"]")),
            "dir/loop.toml:2: devices[2]: cpu:0 is listed twice");
  EXPECT_EQ(Error(Replace(kFull, "[\"cpu:0\", \"cpu:1\"]", "\"all\"")),
            "dir/loop.toml:2: devices: expected \"auto\" or a list like [\"cpu:0\", \"cpu:1\"], "
            "got \"all\"");
}

TEST(LoopConfigTest, DuplicateMemberName) {
  EXPECT_EQ(Error(Replace(kFull, "name = \"b\"", "name = \"a\"")),
            "dir/loop.toml:24: member[2].name: 'a' is already the name of the member at line 18");
}

TEST(LoopConfigTest, BadModelSpec) {
  EXPECT_EQ(Error(Replace(kFull, "dense 32 tanh,", "dense x,")),
            "dir/loop.toml:25: member[2].model: layer 1 'dense x': 'x' is not a positive integer");
}

TEST(LoopConfigTest, ClassesMustAgreeWithTheFinalDense) {
  EXPECT_EQ(Error(Replace(kFull, "epochs = 3", "epochs = 3\nclasses = 3")),
            "dir/loop.toml:21: member[1].model: a's final layer 'dense 10' has 10 units but "
            "defaults.classes = 3 (line 14); the output layer needs one unit per class, so make "
            "them agree");
  EXPECT_EQ(Error(Replace(kFull, "seed = 2", "seed = 2\nclasses = 4")),
            "dir/loop.toml:25: member[2].model: b's final layer 'dense 10' has 10 units but "
            "member[2].classes = 4 (line 27); the output layer needs one unit per class, so make "
            "them agree");
  auto agree = ParseLoopConfig(Replace(kFull, "epochs = 3", "epochs = 3\nclasses = 10"),
                               "dir/loop.toml", "/b");
  ASSERT_TRUE(agree.ok()) << agree.status().ToString();
  // Where each member's model is set, for the shape errors the store check finds later.
  EXPECT_EQ(agree->members[0].model_line, 21);
  EXPECT_EQ(agree->members[0].model_field, "member[1].model");
}

TEST(LoopConfigTest, BadTrainValue) {
  EXPECT_EQ(Error(Replace(kFull, "epochs = 3", "epochs = 0")),
            "dir/loop.toml:13: defaults.epochs: must be at least 1, got 0");
  EXPECT_EQ(
      Error(Replace(kFull, "name = \"sgd\"", "name = \"lion\"")),
      "dir/loop.toml:15: defaults.optimizer.name: unknown optimizer 'lion' (adam, adamw, sgd)");
  // Checked now, by the same table of rules Train applies (train_config.h).
  EXPECT_EQ(
      Error(Replace(kFull, "learning_rate = 0.01", "learning_rate = 0.01, weight_decay = -1")),
      "dir/loop.toml:29: member[2].optimizer.weight_decay: must be >= 0");
  EXPECT_EQ(Error(Replace(kFull, "epochs = 3", "epochs = 3\nprecision = \"fp16\"")),
            "dir/loop.toml:14: defaults.precision: unknown precision 'fp16' (fp32, bf16)");
  EXPECT_EQ(Error(Replace(kFull, "seed = 2", "seed = 2\npool_precision = \"half\"")),
            "dir/loop.toml:27: member[2].pool_precision: unknown pool precision 'half' (auto, "
            "fp32, bf16)");
  auto bf16 = ParseLoopConfig(
      Replace(kFull, "seed = 2", "seed = 2\nprecision = \"bf16\"\npool_precision = \"fp32\""),
      "dir/loop.toml", "/b");
  ASSERT_TRUE(bf16.ok()) << bf16.status().ToString();
  EXPECT_EQ(bf16->members[1].train.precision, "bf16");
  EXPECT_EQ(bf16->members[1].train.pool_precision, "fp32");
  EXPECT_EQ(bf16->members[0].train.precision, "fp32");
  EXPECT_EQ(bf16->members[0].train.pool_precision, "auto");
}

TEST(LoopConfigTest, UnknownStrategy) {
  std::string m = Error(Replace(kFull, "\"entropy\"", "\"entropi\""));
  EXPECT_EQ(m.rfind("dir/loop.toml:32: acquisition.strategy: unknown strategy 'entropi' (did you "
                    "mean entropy?); one of random, ",
                    0),
            0u)
      << m;
}

// Both messages list the strategies strategy.h knows, not a copy of them.
// Both kinds of run's names (which kind a run is, its store says), classification's first.
TEST(LoopConfigTest, StrategyMessagesListTheAcquisitionStrategies) {
  std::string list;
  for (const auto& s : StrategyNames(StrategyTask::kClassification)) list += (list.empty() ? "" : ", ") + s;
  EXPECT_EQ(list,
            "random, entropy, margin, least_confident, variance, bald, vote_entropy, batchbald");
  list += ", max_deviation, mean_deviation";
  EXPECT_EQ(Error(Replace(kFull, "strategy = \"entropy\"\n", "")),
            "dir/loop.toml:31: acquisition.strategy: missing (one of " + list + ")");
  EXPECT_EQ(Error(Replace(kFull, "\"entropy\"", "\"entropi\"")),
            "dir/loop.toml:32: acquisition.strategy: unknown strategy 'entropi' (did you mean "
            "entropy?); one of " +
                list);
}

TEST(LoopConfigTest, DisagreementStrategyNeedsTwoMembers) {
  std::string text = Replace(kFull, "\"entropy\"", "\"bald\"");
  text = Replace(text, "[[member]]\nname = \"b\"", "[[nobody]]\nname = \"b\"");
  // [[nobody]] is itself unknown; check that first, then a real one-member config.
  EXPECT_EQ(Error(text).rfind("dir/loop.toml:23: nobody: unknown field", 0), 0u);
  std::string one = kFull;
  one = Replace(one, "\"entropy\"", "\"bald\"");
  one = one.substr(0, one.find("[[member]]\nname = \"b\"")) + one.substr(one.find("[acquisition]"));
  std::string m = Error(one);
  EXPECT_EQ(m.rfind("dir/loop.toml:", 0), 0u) << m;
  EXPECT_NE(m.find("acquisition.strategy: 'bald' measures disagreement"), std::string::npos) << m;
}

// min_score / max_score: a band of scores the picks must lie in, [min, max).
TEST(LoopConfigTest, AScoreBandIsReadAndChecked) {
  auto with = [](const std::string& band) {
    return Replace(kFull, "strategy = \"entropy\"\n", "strategy = \"entropy\"\n" + band);
  };
  auto c = ParseLoopConfig(with("min_score = 0.05\nmax_score = 0.5\n"), "dir/loop.toml", "/b");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->acquisition.band.lower.value_or(-1), 0.05);
  EXPECT_EQ(c->acquisition.band.upper.value_or(-1), 0.5);
  c = ParseLoopConfig(with("max_score = 2\n"), "dir/loop.toml", "/b");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->acquisition.band.lower.has_value());
  EXPECT_EQ(c->acquisition.band.upper.value_or(-1), 2.0);
  c = ParseLoopConfig(kFull, "dir/loop.toml", "/b");
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->acquisition.band.lower || c->acquisition.band.upper);
  EXPECT_EQ(Error(with("min_score = 0.5\nmax_score = 0.5\n")),
            "dir/loop.toml:34: acquisition.max_score: 0.5 is not above min_score 0.5: no sample "
            "could be picked");
  EXPECT_EQ(Error(with("min_score = nan\n")),
            "dir/loop.toml:33: acquisition.min_score: must be a finite number");
  EXPECT_EQ(Error(with("max_score = \"high\"\n")).find("dir/loop.toml:33: acquisition.max_score"),
            0u);
}

TEST(LoopConfigTest, CommandOracleWithoutCommand) {
  EXPECT_EQ(Error(std::string(kFull) + "\n[oracle]\nkind = \"command\"\n"),
            "dir/loop.toml:40: oracle.kind: kind = \"command\" needs command = [\"program\", "
            "\"arg\", ...]");
  EXPECT_EQ(Error(std::string(kFull) + "\n[oracle]\ncommand = [\"x\"]\n"),
            "dir/loop.toml:40: oracle.command: only for kind = \"command\"");
  EXPECT_EQ(Error(std::string(kFull) + "\n[oracle]\ntimeout_s = 5\n"),
            "dir/loop.toml:40: oracle.timeout_s: only for kind = \"command\"");
  std::string command = std::string(kFull) + "\n[oracle]\nkind = \"command\"\ncommand = [\"x\"]\n";
  EXPECT_EQ(Error(command + "timeout_s = -1\n"),
            "dir/loop.toml:42: oracle.timeout_s: must be >= 0 (0: no limit) and at most 1e7 "
            "seconds");
}

TEST(LoopConfigTest, UpdateStepsDefaultToOneAcquire) {
  auto c = ParseLoopConfig(kFull, "loop.toml", "/cfg");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->updates.size(), 1u);
  EXPECT_EQ(c->updates[0].kind, UpdateStepConfig::Kind::kAcquire);
  EXPECT_EQ(c->updates[0].name, "acquire");
  EXPECT_FALSE(c->updates_explicit);
  // The JSON (and so the fingerprint) of a config without [[update]] is as it was.
  EXPECT_FALSE(LoopConfigToJson(*c).contains("update"));
}

TEST(LoopConfigTest, UpdateStepsInOrder) {
  std::string text = std::string(kFull) + R"(
[[update]]
kind = "command"
command = ["./fix.py", "--drop", "3"]
timeout_s = 30

[[update]]
kind = "acquire"

[[update]]
kind = "command"
name = "second"
command = ["clean"]

[[update]]
kind = "command"
command = ["/usr/bin/python3", "tools/drop.py", "--fast"]
)";
  auto c = ParseLoopConfig(text, "loop.toml", "/cfg");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->updates.size(), 4u);
  EXPECT_EQ(c->updates[3].name, "drop.py");
  EXPECT_EQ(c->updates[0].kind, UpdateStepConfig::Kind::kCommand);
  EXPECT_EQ(c->updates[0].command, (std::vector<std::string>{"/cfg/fix.py", "--drop", "3"}));
  EXPECT_DOUBLE_EQ(c->updates[0].timeout_s, 30);
  EXPECT_EQ(c->updates[0].name, "fix.py");
  EXPECT_EQ(c->updates[0].line, 39);
  EXPECT_EQ(c->updates[1].kind, UpdateStepConfig::Kind::kAcquire);
  EXPECT_EQ(c->updates[1].name, "acquire");
  EXPECT_EQ(c->updates[2].name, "second");
  EXPECT_EQ(c->updates[2].command, (std::vector<std::string>{"clean"}));
  nlohmann::json j = LoopConfigToJson(*c);
  ASSERT_EQ(j["update"].size(), 4u);
  EXPECT_EQ(j["update"][0]["kind"], "command");
  EXPECT_EQ(j["update"][0]["timeout_s"], 30);
  // The steps are part of what a resume may not change.
  auto other = ParseLoopConfig(kFull, "loop.toml", "/cfg");
  ASSERT_TRUE(other.ok());
  EXPECT_NE(LoopConfigFingerprint(*c), LoopConfigFingerprint(*other));
  EXPECT_FALSE(CheckResumeCompatible(*other, *c).ok());
}

TEST(LoopConfigTest, BadUpdateSteps) {
  const std::string base = std::string(kFull) + "\n[[update]]\n";
  EXPECT_EQ(Error(base + "kind = \"comand\"\ncommand = [\"x\"]\n"),
            "dir/loop.toml:40: update[1].kind: unknown update step 'comand' (did you mean "
            "command?); one of acquire, command, pseudo_label, relabel_or_drop, import_new");
  EXPECT_EQ(Error(base + "kind = \"command\"\ncomand = [\"x\"]\n"),
            "dir/loop.toml:41: update[1].comand: unknown field (did you mean command?)");
  EXPECT_EQ(Error(base + "command = [\"x\"]\n"),
            "dir/loop.toml:39: update[1].kind: missing (one of acquire, command, pseudo_label, "
            "relabel_or_drop, import_new)");
  EXPECT_EQ(Error(base + "kind = \"pseudo_label\"\nthreshold = 0.9\ndirectory = \"in\"\n"),
            "dir/loop.toml:42: update[1].directory: only for kind = \"import_new\"");
  EXPECT_EQ(Error(base + "kind = \"import_new\"\n"),
            "dir/loop.toml:39: update[1].directory: missing (where new .npy and .csv files "
            "arrive)");
  EXPECT_EQ(Error(base + "kind = \"command\"\n"),
            "dir/loop.toml:40: update[1].kind: kind = \"command\" needs command = "
            "[\"program\", \"arg\", ...]");
  EXPECT_EQ(Error(base + "kind = \"acquire\"\ntimeout_s = 3\n"),
            "dir/loop.toml:41: update[1].timeout_s: only for kind = \"command\"");
  EXPECT_EQ(Error(base + "kind = \"command\"\ncommand = [\"x\"]\ntimeout_s = -1\n"),
            "dir/loop.toml:42: update[1].timeout_s: must be >= 0 (0: no limit) and at most 1e7 "
            "seconds");
  EXPECT_EQ(Error(base + "kind = \"command\"\ncommand = []\n"),
            "dir/loop.toml:41: update[1].command: expected a non-empty list of strings (argv), "
            "got an array");
  EXPECT_EQ(Error(base + "kind = \"acquire\"\n\n[[update]]\nkind = \"acquire\"\n"),
            "dir/loop.toml:43: update[2].kind: a run has at most one acquire step (the other is "
            "at line 39)");
  EXPECT_EQ(Error(base + "kind = \"command\"\ncommand = [\"x\"]\nname = \"a b\"\n"),
            "dir/loop.toml:42: update[1].name: 'a b' is not a valid step name: use letters, "
            "digits, '_', '-' and '.', not starting with '.' or '-'");
}

TEST(LoopConfigTest, RelabelOrDropAndTrainPredictions) {
  const std::string steps =
      "\n[oracle]\nkind = \"command\"\ncommand = [\"review\"]\n\n[[update]]\nkind = "
      "\"relabel_or_drop\"\nthreshold = 0.1\nmax_per_round = 150\naction = \"relabel\"\n\n"
      "[[update]]\nkind = \"command\"\ncommand = [\"x\"]\npredict = [\"pool\", \"train\"]\n";
  // Without an acquire step the [acquisition] table may go.
  const std::string text =
      Replace(kFull, "[acquisition]\nstrategy = \"entropy\"\nbatch_size = 100\n", "") + steps;
  auto c = ParseLoopConfig(text, "dir/loop.toml", "/base");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->updates.size(), 2u);
  const UpdateStepConfig& curate = c->updates[0];
  EXPECT_EQ(curate.kind, UpdateStepConfig::Kind::kRelabelOrDrop);
  EXPECT_EQ(curate.name, "relabel_or_drop");
  EXPECT_EQ(curate.threshold, 0.1);
  EXPECT_EQ(curate.max_per_round, 150);
  EXPECT_EQ(curate.action, UpdateStepConfig::Action::kRelabel);
  EXPECT_TRUE(c->updates[1].predict_train);
  EXPECT_FALSE(HasAcquireStep(*c));
  EXPECT_TRUE(UpdatesReadTrainPredictions(*c));
  EXPECT_TRUE(c->acquisition.strategy.empty());
  // Every setting is part of the fingerprint, so a resume cannot change it.
  auto other = ParseLoopConfig(Replace(text, "threshold = 0.1", "threshold = 0.2"), "dir/loop.toml",
                               "/base");
  ASSERT_TRUE(other.ok());
  EXPECT_NE(LoopConfigFingerprint(*c), LoopConfigFingerprint(*other));
  auto dropping = ParseLoopConfig(Replace(text, "action = \"relabel\"", "action = \"drop\""),
                                  "dir/loop.toml", "/base");
  ASSERT_TRUE(dropping.ok());
  EXPECT_EQ(dropping->updates[0].action, UpdateStepConfig::Action::kDrop);
  EXPECT_NE(LoopConfigFingerprint(*c), LoopConfigFingerprint(*dropping));

  // ... but an acquire step needs it, and a run without one needs max_rounds.
  EXPECT_EQ(Error(Replace(text, "kind = \"relabel_or_drop\"", "kind = \"acquire\"")),
            "dir/loop.toml:1: acquisition: missing (an [acquisition] table, for the acquire step)");
  EXPECT_EQ(Error(Replace(text, "max_rounds = 4\n", "")),
            "dir/loop.toml:32: stop.max_rounds: missing (a run without an acquire step never "
            "runs out of samples to acquire: say how many rounds it runs)");
  // relabel needs an oracle with labels to give.
  EXPECT_EQ(Error(Replace(text, "kind = \"command\"\ncommand = [\"review\"]",
                          "kind = \"hidden_labels\"")),
            "dir/loop.toml:43: update[1].action: \"relabel\" asks the oracle for new labels, and a "
            "hidden_labels oracle has none for train samples: set [oracle] kind = \"command\", or "
            "action = \"drop\"");
  EXPECT_EQ(Error(Replace(text, "predict = [\"pool\", \"train\"]", "predict = \"train\"")),
            "dir/loop.toml:49: update[2].predict: expected a list of the tables the members "
            "predict for the program: \"train\", \"pool\", \"test\", got \"train\"");
  EXPECT_EQ(Error(Replace(text, "max_per_round = 150", "max_per_class = 150")),
            "dir/loop.toml:43: update[1].max_per_class: only for kind = \"pseudo_label\"");
  EXPECT_EQ(Error(Replace(text, "predict = [\"pool\", \"train\"]", "threshold = 0.5")),
            "dir/loop.toml:49: update[2].threshold: only for kind = \"pseudo_label\" and "
            "\"relabel_or_drop\"");
}

TEST(LoopConfigTest, BatchSelectionAndColdStart) {
  const std::string base = "[acquisition]\nstrategy = \"entropy\"\nbatch_size = 100\n";
  auto with = [&](const std::string& extra) { return Replace(kFull, base, base + extra); };
  auto c = ParseLoopConfig(with("selection = \"softrank\"\ntemperature = 0.5\n"
                                "cold_start_rounds = 2\n"),
                           "dir/loop.toml", "/base");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->acquisition.selection.kind, BatchSelection::Kind::kSoftRank);
  EXPECT_EQ(c->acquisition.selection.temperature, 0.5);
  EXPECT_EQ(c->acquisition.cold_start_rounds, 2);
  EXPECT_EQ(c->acquisition.StrategyOfRound(0), "random");
  EXPECT_EQ(c->acquisition.StrategyOfRound(1), "random");
  EXPECT_EQ(c->acquisition.StrategyOfRound(2), "entropy");
  // A run that sets neither keeps its JSON, and so its fingerprint, as before.
  auto plain = ParseLoopConfig(kFull, "dir/loop.toml", "/base");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(LoopConfigToJson(*plain)["acquisition"].contains("selection"));
  EXPECT_FALSE(LoopConfigToJson(*plain)["acquisition"].contains("cold_start_rounds"));
  EXPECT_NE(LoopConfigFingerprint(*c), LoopConfigFingerprint(*plain));

  EXPECT_EQ(Error(with("selection = \"sofmax\"\n")),
            "dir/loop.toml:34: acquisition.selection: unknown selection 'sofmax' (did you mean "
            "softmax?); one of top, power, softmax, softrank");
  EXPECT_EQ(Error(with("temperature = 2\n")),
            "dir/loop.toml:34: acquisition.temperature: only for a stochastic selection (power, "
            "softmax, softrank)");
  EXPECT_EQ(Error(with("selection = \"power\"\ntemperature = 0\n")),
            "dir/loop.toml:35: acquisition.temperature: must be > 0 and at most 1e6");
  EXPECT_EQ(Error(Replace(with("selection = \"power\"\n"), "\"entropy\"", "\"margin\"")),
            "dir/loop.toml:34: acquisition.selection: power draws by score^(1/T), and margin's "
            "scores are <= 0; use softmax or softrank");
  EXPECT_EQ(Error(with("cold_start_strategy = \"bald\"\n")),
            "dir/loop.toml:34: acquisition.cold_start_strategy: set cold_start_rounds too: the "
            "rounds it acquires in");
  EXPECT_EQ(Error(with("cold_start_rounds = 1\ncold_start_strategy = \"randon\"\n")),
            "dir/loop.toml:35: acquisition.cold_start_strategy: unknown strategy 'randon' (did "
            "you mean random?); one of random, entropy, margin, least_confident, variance, bald, "
            "vote_entropy, batchbald, max_deviation, mean_deviation");
}

TEST(LoopConfigTest, DropoutPasses) {
  auto c = ParseLoopConfig(
      Replace(kFull, "warm_start = false\n", "warm_start = false\ndropout_passes = 8\n"),
      "dir/loop.toml", "/base");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->members[0].dropout_passes, 0);
  EXPECT_EQ(c->members[1].dropout_passes, 8);
  EXPECT_FALSE(LoopConfigToJson(*c)["member"][0].contains("dropout_passes"));
  EXPECT_EQ(LoopConfigToJson(*c)["member"][1]["dropout_passes"], 8);
  // From [defaults], every native member must have dropout to sample.
  EXPECT_EQ(Error(Replace(kFull, "warm_start = true\n", "warm_start = true\ndropout_passes = 4\n")),
            "dir/loop.toml:17: defaults.dropout_passes: a's model 'dense 64 relu, dense 10' has no "
            "dropout layer, so its passes would all be equal; add one (dropout 0.2) or set "
            "dropout_passes = 0");
  EXPECT_EQ(Error(Replace(kFull, "seed = 1\n", "seed = 1\ndropout_passes = 2\n")),
            "dir/loop.toml:22: member[1].dropout_passes: a's model 'dense 64 relu, dense 10' has "
            "no dropout layer, so its passes would all be equal; add one (dropout 0.2) or set "
            "dropout_passes = 0");
  EXPECT_EQ(
      Error(Replace(kFull, "warm_start = false\n", "warm_start = false\ndropout_passes = -1\n")),
      "dir/loop.toml:29: member[2].dropout_passes: expected an integer >= 0, got -1");
  EXPECT_EQ(
      Error(Replace(kFull, "warm_start = false\n", "warm_start = false\ndropout_passes = 5000\n")),
      "dir/loop.toml:29: member[2].dropout_passes: must be at most 1000");
}

TEST(LoopConfigTest, PoolSample) {
  const std::string base = "[acquisition]\nstrategy = \"entropy\"\nbatch_size = 100\n";
  auto with = [&](const std::string& extra) { return Replace(kFull, base, base + extra); };
  auto c = ParseLoopConfig(with("pool_sample = 5000\n"), "dir/loop.toml", "/base");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->acquisition.pool_sample, 5000);
  EXPECT_EQ(LoopConfigToJson(*c)["acquisition"]["pool_sample"], 5000);
  auto plain = ParseLoopConfig(kFull, "dir/loop.toml", "/base");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(LoopConfigToJson(*plain)["acquisition"].contains("pool_sample"));
  EXPECT_EQ(Error(with("pool_sample = 50\n")),
            "dir/loop.toml:34: acquisition.pool_sample: 50 is below batch_size 100: a round "
            "could not pick its batch from the sample");
  EXPECT_EQ(Error(with("pool_sample = 0\n")),
            "dir/loop.toml:34: acquisition.pool_sample: expected an integer >= 1, got 0");
  EXPECT_EQ(Error(with("pool_sample = 500\n") +
                  "\n[[update]]\nkind = \"acquire\"\n\n[[update]]\nkind = \"pseudo_label\"\n"
                  "threshold = 0.9\n"),
            "dir/loop.toml:34: acquisition.pool_sample: update step 'pseudo_label' (line 43) "
            "reads the members' pool predictions, which would cover only the sample");
}

TEST(LoopConfigTest, BatchBaldSettings) {
  const std::string base = "[acquisition]\nstrategy = \"entropy\"\nbatch_size = 100\n";
  auto with = [&](const std::string& extra) {
    return Replace(Replace(kFull, base, base + extra), "\"entropy\"", "\"batchbald\"");
  };
  auto c = ParseLoopConfig(with("batchbald_samples = 300\nbatchbald_candidates = 4000\n"),
                           "dir/loop.toml", "/base");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->acquisition.batch_bald.samples, 300);
  EXPECT_EQ(c->acquisition.batch_bald.candidates, 4000);
  EXPECT_EQ(LoopConfigToJson(*c)["acquisition"]["batchbald_candidates"], 4000);
  auto defaults = ParseLoopConfig(with(""), "dir/loop.toml", "/base");
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(defaults->acquisition.batch_bald.samples, BatchBaldOptions{}.samples);
  auto plain = ParseLoopConfig(kFull, "dir/loop.toml", "/base");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(LoopConfigToJson(*plain)["acquisition"].contains("batchbald_samples"));

  EXPECT_EQ(Error(Replace(with("batchbald_samples = 300\n"), "\"batchbald\"", "\"bald\"")),
            "dir/loop.toml:34: acquisition.batchbald_samples: only for strategy = \"batchbald\"");
  EXPECT_EQ(Error(with("batchbald_candidates = 0\n")),
            "dir/loop.toml:34: acquisition.batchbald_candidates: expected an integer >= 1, got 0");
  EXPECT_EQ(Error(with("selection = \"softmax\"\n")),
            "dir/loop.toml:34: acquisition.selection: batchbald picks its batch jointly; it takes "
            "no stochastic selection");
  // As the cold start's strategy its settings are taken too.
  auto cold =
      ParseLoopConfig(Replace(kFull, base,
                              base + "cold_start_rounds = 1\ncold_start_strategy = \"batchbald\"\n"
                                     "batchbald_samples = 50\n"),
                      "dir/loop.toml", "/base");
  ASSERT_TRUE(cold.ok()) << cold.status().ToString();
  EXPECT_EQ(cold->acquisition.batch_bald.samples, 50);
}

TEST(LoopConfigTest, NoStopRule) {
  std::string text = Replace(kFull, "max_rounds = 4\ntarget = { metric = \"nll\", value = 0.3 }\n",
                             "stop_when_pool_exhausted = true\n");
  EXPECT_EQ(Error(text),
            "dir/loop.toml:35: stop: no stop rule: set at least one of max_rounds, label_budget "
            "or target");
  EXPECT_EQ(Error(Replace(kFull, "metric = \"nll\"", "metric = \"f1\"")),
            "dir/loop.toml:37: stop.target.metric: unknown metric 'f1' (accuracy, nll, brier, "
            "ece, rmse, mae, calibration_error)");
}

// A target names a metric the loop computes for one kind of run or the other (which kind a
// run is, only its store says: the check against the store refuses the other kind's).
TEST(LoopConfigTest, TargetMetricMustBeOneTheLoopComputes) {
  EXPECT_EQ(Error(Replace(kFull, "metric = \"nll\", ", "")),
            "dir/loop.toml:37: stop.target.metric: missing (accuracy, nll, brier, ece, rmse, mae, "
            "calibration_error)");
  for (const char* metric :
       {"accuracy", "nll", "brier", "ece", "rmse", "mae", "calibration_error"}) {
    auto c = ParseLoopConfig(Replace(kFull, "\"nll\"", std::string("\"") + metric + "\""),
                             "dir/loop.toml", "/base");
    ASSERT_TRUE(c.ok()) << metric << ": " << c.status().ToString();
    EXPECT_EQ(c->stop.target->higher_is_better, std::string(metric) == "accuracy") << metric;
  }
}

// A target as the only rule, with the pool allowed to run dry, is a legitimate run: it ends
// at the target, or when nothing is left to acquire.
TEST(LoopConfigTest, TargetAloneWithAnExhaustiblePoolParses) {
  std::string text = Replace(kFull, "max_rounds = 4\n", "stop_when_pool_exhausted = false\n");
  auto c = ParseLoopConfig(text, "dir/loop.toml", "/base");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->stop.max_rounds.has_value());
  EXPECT_FALSE(c->stop.label_budget.has_value());
  EXPECT_TRUE(c->stop.target.has_value());
  EXPECT_FALSE(c->stop.stop_when_pool_exhausted);
}

// One default for min_members, all members: in the struct and from the parser alike.
TEST(LoopConfigTest, MinMembersDefaultsToAllMembers) {
  EXPECT_EQ(FailureConfig{}.min_members, FailureConfig::kAllMembers);
  EXPECT_EQ(LoopConfig{}.failure.min_members, FailureConfig::kAllMembers);
  for (const std::string& text :
       {std::string(kFull), std::string(kFull) + "\n[failure]\nretries = 1\n",
        Replace(kFull, "[acquisition]",
                "[[member]]\nname = \"c\"\nmodel = \"dense 10\"\n\n[acquisition]")}) {
    auto c = ParseLoopConfig(text, "dir/loop.toml", "/base");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->failure.min_members, static_cast<int64_t>(c->members.size()));
    EXPECT_EQ(LoopConfigToJson(*c)["failure"]["min_members"], c->members.size());
  }
}

TEST(LoopConfigTest, MinMembersAboveMembers) {
  EXPECT_EQ(Error(std::string(kFull) + "\n[failure]\nmin_members = 3\n"),
            "dir/loop.toml:40: failure.min_members: 3 is more than the 2 members configured");
}

TEST(LoopConfigTest, NumbersMustBeFiniteAndBounded) {
  EXPECT_NE(Error(std::string(kFull) + "\n[failure]\nheartbeat_timeout_s = inf\n")
                .find("failure.heartbeat_timeout_s: must be > 0 and at most 1e7 seconds"),
            std::string::npos);
  EXPECT_NE(Error(std::string(kFull) + "\n[failure]\nattempt_timeout_s = 1e300\n")
                .find("failure.attempt_timeout_s:"),
            std::string::npos);
  EXPECT_NE(Error(Replace(kFull, "value = 0.3", "value = nan")).find("must be a finite number"),
            std::string::npos);
}

TEST(LoopConfigTest, MissingRequired) {
  EXPECT_EQ(Error(Replace(kFull, "name = \"demo\"\n", "")),
            "dir/loop.toml:1: name: missing (the run's name)");
  EXPECT_EQ(Error(Replace(kFull, "model = \"dense 64 relu, dense 10\"\n", "")),
            "dir/loop.toml:18: member[1].model: missing (a model spec, here or in [defaults])");
  EXPECT_EQ(Error(Replace(kFull, "name = \"a\"", "name = \"a/b\"")).find("member[1].name: 'a/b'"),
            std::string("dir/loop.toml:19: ").size());
}

TEST(LoopConfigTest, SlurmLauncherAndItsTable) {
  std::string slurm = Replace(Replace(kFull, "launcher = \"local\"", "launcher = \"slurm\""),
                              "devices = [\"cpu:0\", \"cpu:1\"]", "devices = \"auto\"");
  auto c = ParseLoopConfig(slurm +
                               "[slurm]\npartition = \"gpu\"\ntime = \"1:00:00\"\n"
                               "cpus_per_member = 4\ngpus_per_member = 1\n"
                               "srun_args = [\"--exclusive\"]\nqueue_timeout_s = 60\nslots = 3\n",
                           "dir/loop.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->launcher, Launcher::kSlurm);
  EXPECT_TRUE(c->devices_auto);
  EXPECT_EQ(c->slurm.partition, "gpu");
  EXPECT_EQ(c->slurm.time, "1:00:00");
  EXPECT_EQ(c->slurm.gpus_per_member, 1);
  EXPECT_EQ(c->slurm.srun_args, std::vector<std::string>{"--exclusive"});
  EXPECT_EQ(c->slurm.queue_timeout_s, 60);
  EXPECT_EQ(c->slurm.slots, 3);
  EXPECT_EQ(c->threads_per_cpu_device, 4);  // a worker's threads are its step's CPUs
  EXPECT_EQ(LoopConfigToJson(*c)["slurm"]["partition"], "gpu");
  // A device list means nothing to Slurm.
  EXPECT_EQ(Error(Replace(kFull, "launcher = \"local\"", "launcher = \"slurm\"")),
            "dir/loop.toml:2: devices: with launcher = \"slurm\" devices must be \"auto\" "
            "(Slurm places the steps; set slurm.slots to run outside an allocation)");
  EXPECT_EQ(Error(slurm + "[slurm]\npartiton = \"gpu\"\n"),
            "dir/loop.toml:" + std::to_string(std::count(slurm.begin(), slurm.end(), '\n') + 2) +
                ": slurm.partiton: unknown field (did you mean partition?)");
  EXPECT_NE(Error(slurm + "[slurm]\nsrun_args = \"--exclusive\"\n")
                .find("slurm.srun_args: expected a list"),
            std::string::npos);
  EXPECT_NE(Error(kFull + std::string("[slurm]\npartition = \"gpu\"\n"))
                .find("slurm: a [slurm] table needs launcher = \"slurm\""),
            std::string::npos);
  EXPECT_EQ(Error(Replace(kFull, "launcher = \"local\"", "launcher = \"ssh\"")),
            "dir/loop.toml:5: launcher: unknown launcher 'ssh' (local, slurm)");
  // A local run's JSON has no slurm table (its fingerprint did not change).
  auto local = ParseLoopConfig(kFull, "dir/loop.toml");
  ASSERT_TRUE(local.ok());
  EXPECT_FALSE(LoopConfigToJson(*local).contains("slurm"));
}

TEST(LoopConfigTest, ResumeCompatibility) {
  auto old_config = ParseLoopConfig(kFull, "loop.toml", "/b");
  ASSERT_TRUE(old_config.ok());
  auto check = [&](const std::string& text) {
    auto now = ParseLoopConfig(text, "loop.toml", "/b");
    EXPECT_TRUE(now.ok()) << now.status().ToString();
    return now.ok() ? CheckResumeCompatible(*old_config, *now) : now.status();
  };
  // Safe.
  for (const std::string& text :
       {Replace(kFull, "max_rounds = 4", "max_rounds = 10"),
        Replace(kFull, "max_rounds = 4", "max_rounds = 4\nlabel_budget = 1000"),
        Replace(kFull, "value = 0.3", "value = 0.2"),
        Replace(kFull, "[\"cpu:0\", \"cpu:1\"]", "[\"cpu:0\", \"cpu:1\", \"cpu:2\"]"),
        Replace(kFull, "threads_per_cpu_device = 2", "threads_per_cpu_device = 1"),
        std::string(kFull) + "\n[failure]\nretries = 5\nheartbeat_timeout_s = 120\n"
                             "attempt_timeout_s = 3600\nmin_members = 1\n"}) {
    Status s = check(text);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  auto now =
      ParseLoopConfig(Replace(kFull, "max_rounds = 4", "max_rounds = 10"), "loop.toml", "/b");
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(LoopConfigFingerprint(*old_config), LoopConfigFingerprint(*now));
  auto changes = DiffLoopConfigs(*old_config, *now);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].field, "stop.max_rounds");
  EXPECT_EQ(changes[0].before, "4");
  EXPECT_EQ(changes[0].after, "10");
  EXPECT_TRUE(changes[0].safe_on_resume);

  // Unsafe: each names its field.
  struct Case {
    std::string text;
    std::string field;
  };
  for (const Case& c : std::vector<Case>{
           {Replace(kFull, "seed = 2", "seed = 3"), "member[2].seed"},
           {Replace(kFull, "dense 64 relu", "dense 65 relu"), "member[1].model"},
           {Replace(kFull, "epochs = 7", "epochs = 8"), "member[2].epochs"},
           {Replace(kFull, "learning_rate = 0.01", "learning_rate = 0.02"),
            "member[2].optimizer.learning_rate"},
           {Replace(kFull, "warm_start = false", "warm_start = true"), "member[2].warm_start"},
           {Replace(kFull, "name = \"b\"", "name = \"c\""), "member[2].name"},
           {Replace(kFull, "[acquisition]",
                    "[[member]]\nname = \"c\"\nmodel = \"dense 10\"\n\n"
                    "[acquisition]"),
            "member"},
           {Replace(kFull, "\"entropy\"", "\"margin\""), "acquisition.strategy"},
           {Replace(kFull, "batch_size = 100", "batch_size = 200"), "acquisition.batch_size"},
           {Replace(kFull, "batch_size = 100", "batch_size = 100\nseed = 9"), "acquisition.seed"},
           {Replace(kFull, "train = \"labelled\"", "train = \"train\""), "store.train"},
           {Replace(kFull, "generation = 3", "generation = 4"), "store.generation"},
           {std::string(kFull) + "\n[oracle]\nkind = \"command\"\ncommand = [\"x\"]\n",
            "oracle.command"},
       }) {
    Status s = check(c.text);
    ASSERT_FALSE(s.ok()) << c.field;
    EXPECT_EQ(s.message().rfind("loop.toml: " + c.field + ": changed from ", 0), 0u) << s.message();
    auto changed = ParseLoopConfig(c.text, "loop.toml", "/b");
    EXPECT_NE(LoopConfigFingerprint(*old_config), LoopConfigFingerprint(*changed)) << c.field;
    EXPECT_NE(s.message().find("start a new run with another name instead"), std::string::npos);
  }
  // A config that sets run_dir: a new name would not move the run, so the advice says run_dir.
  std::string with_dir = Replace(kFull, "name = \"demo\"", "name = \"demo\"\nrun_dir = \"out/x\"");
  auto old_with_dir = ParseLoopConfig(with_dir, "loop.toml", "/b");
  ASSERT_TRUE(old_with_dir.ok()) << old_with_dir.status().ToString();
  auto new_with_dir = ParseLoopConfig(Replace(with_dir, "seed = 2", "seed = 3"), "loop.toml", "/b");
  ASSERT_TRUE(new_with_dir.ok());
  Status s = CheckResumeCompatible(*old_with_dir, *new_with_dir);
  EXPECT_NE(s.message().find("this config sets run_dir = /b/out/x, so change run_dir"),
            std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace cohort::loop
