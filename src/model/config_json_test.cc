#include "model/config_json.h"

#include <gtest/gtest.h>

#include <string>

namespace cohort::model {
namespace {

using nlohmann::json;

// The error message TrainConfigFromJson gives for `text` as member "m2" (empty if it parsed).
std::string Error(const std::string& text, const TrainConfig& base = {}) {
  auto c = TrainConfigFromJson(json::parse(text), base, "m2");
  if (c.ok()) return "";
  EXPECT_TRUE(c.status().IsInvalidArgument()) << c.status().ToString();
  EXPECT_EQ(c.status().message().find('\n'), std::string::npos) << c.status().message();
  return c.status().message();
}

TrainConfig NonDefault() {
  TrainConfig c;
  c.member = "m7";
  c.model = "conv 32 3 relu, maxpool 2, flatten, dense 10";
  c.loss = "cross_entropy";
  c.label_smoothing = 0.05;
  c.classes = 12;
  c.standardize = true;
  c.optimizer = {"sgd", 0.25, 1e-4, 0.8, 0.85, 0.95};
  c.schedule = {"cosine", 3, 7, 0.5, 1e-5};
  c.grad_clip_norm = 1.5;
  c.batch_size = 256;
  c.epochs = 42;
  c.seed = 18446744073709551615ULL;  // the largest seed survives
  c.validation_fraction = 0.2;
  c.patience = 4;
  c.warm_start_from = "runs/r1/m7.ckpt";
  c.device = {"cuda:1", 6};
  return c;
}

void ExpectSame(const TrainConfig& a, const TrainConfig& b) {
  EXPECT_EQ(TrainConfigToJson(a), TrainConfigToJson(b));
  EXPECT_EQ(a.member, b.member);
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.label_smoothing, b.label_smoothing);
  EXPECT_EQ(a.classes, b.classes);
  EXPECT_EQ(a.standardize, b.standardize);
  EXPECT_EQ(a.optimizer.name, b.optimizer.name);
  EXPECT_EQ(a.optimizer.learning_rate, b.optimizer.learning_rate);
  EXPECT_EQ(a.optimizer.weight_decay, b.optimizer.weight_decay);
  EXPECT_EQ(a.optimizer.momentum, b.optimizer.momentum);
  EXPECT_EQ(a.optimizer.beta1, b.optimizer.beta1);
  EXPECT_EQ(a.optimizer.beta2, b.optimizer.beta2);
  EXPECT_EQ(a.schedule.name, b.schedule.name);
  EXPECT_EQ(a.schedule.warmup_epochs, b.schedule.warmup_epochs);
  EXPECT_EQ(a.schedule.step_epochs, b.schedule.step_epochs);
  EXPECT_EQ(a.schedule.gamma, b.schedule.gamma);
  EXPECT_EQ(a.schedule.min_learning_rate, b.schedule.min_learning_rate);
  EXPECT_EQ(a.grad_clip_norm, b.grad_clip_norm);
  EXPECT_EQ(a.batch_size, b.batch_size);
  EXPECT_EQ(a.epochs, b.epochs);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.validation_fraction, b.validation_fraction);
  EXPECT_EQ(a.patience, b.patience);
  EXPECT_EQ(a.warm_start_from, b.warm_start_from);
  EXPECT_EQ(a.device.device, b.device.device);
  EXPECT_EQ(a.device.threads, b.device.threads);
}

TEST(ConfigJsonTest, RoundTripKeepsEveryField) {
  TrainConfig original = NonDefault();
  // Through text too, as the config travels in a worker command.
  json j = json::parse(TrainConfigToJson(original).dump());
  auto back = TrainConfigFromJson(j, TrainConfig{}, "");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSame(*back, original);
}

TEST(ConfigJsonTest, ToJsonUsesTheFieldNames) {
  json j = TrainConfigToJson(TrainConfig{});
  for (const char* key :
       {"member", "model", "loss", "label_smoothing", "classes", "standardize", "optimizer",
        "schedule", "grad_clip_norm", "batch_size", "epochs", "seed", "validation_fraction",
        "patience", "warm_start_from", "augment", "precision", "pool_precision", "device"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j.size(), 19u);
  EXPECT_EQ(j["augment"].size(), 3u);
  EXPECT_EQ(j["optimizer"].size(), 6u);
  EXPECT_EQ(j["optimizer"]["learning_rate"], 1e-3);
  EXPECT_EQ(j["schedule"].size(), 5u);
  EXPECT_EQ(j["schedule"]["name"], "constant");
  EXPECT_EQ(j["device"], json({{"device", "cpu"}, {"threads", 1}}));
}

TEST(ConfigJsonTest, AbsentFieldsKeepTheBase) {
  auto empty = TrainConfigFromJson(json::object(), TrainConfig{}, "m1");
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  ExpectSame(*empty, TrainConfig{});

  TrainConfig base = NonDefault();
  auto c = TrainConfigFromJson(json{{"epochs", 3}, {"model", "dense 10"}}, base, "m1");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->epochs, 3);
  EXPECT_EQ(c->model, "dense 10");
  TrainConfig expected = base;
  expected.epochs = 3;
  expected.model = "dense 10";
  ExpectSame(*c, expected);
}

TEST(ConfigJsonTest, NestedObjectsOverrideOnlyWhatTheyName) {
  TrainConfig base = NonDefault();
  auto c = TrainConfigFromJson(
      json::parse(R"({"optimizer": {"learning_rate": 0.5}, "schedule": {"gamma": 0.3},
                      "device": {"threads": 2}})"),
      base, "m1");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  TrainConfig expected = base;
  expected.optimizer.learning_rate = 0.5;
  expected.schedule.gamma = 0.3;
  expected.device.threads = 2;
  ExpectSame(*c, expected);
  EXPECT_EQ(c->optimizer.name, "sgd");
  EXPECT_EQ(c->device.device, "cuda:1");
}

TEST(ConfigJsonTest, NumbersConvertWhereExact) {
  auto c = TrainConfigFromJson(json::parse(R"({"epochs": 10.0, "grad_clip_norm": 2,
                                               "seed": 7, "classes": 0})"),
                               TrainConfig{}, "m1");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->epochs, 10);
  EXPECT_EQ(c->grad_clip_norm, 2.0);
  EXPECT_EQ(c->seed, 7u);
}

TEST(ConfigJsonTest, ValuesAreLeftToTrainToRangeCheck) {
  // A negative batch size is a type-correct value; Train rejects it, not the parser.
  auto c = TrainConfigFromJson(json{{"batch_size", -5}, {"optimizer", {{"name", "lion"}}}},
                               TrainConfig{}, "m1");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->batch_size, -5);
  EXPECT_EQ(c->optimizer.name, "lion");
}

TEST(ConfigJsonTest, UnknownKeysAreNamedWithASuggestion) {
  EXPECT_EQ(Error(R"({"optimizer": {"lr": 0.1}})"),
            "member m2: config.optimizer.lr: unknown field (did you mean learning_rate?)");
  EXPECT_EQ(Error(R"({"epoch": 3})"),
            "member m2: config.epoch: unknown field (did you mean epochs?)");
  EXPECT_EQ(Error(R"({"batchsize": 3})"),
            "member m2: config.batchsize: unknown field (did you mean batch_size?)");
  EXPECT_EQ(Error(R"({"schedule": {"warmup": 2}})"),
            "member m2: config.schedule.warmup: unknown field (did you mean warmup_epochs?)");
  EXPECT_EQ(Error(R"({"val_fraction": 0.1})"),
            "member m2: config.val_fraction: unknown field (did you mean validation_fraction?)");
  EXPECT_EQ(Error(R"({"device": {"thread": 2}})"),
            "member m2: config.device.thread: unknown field (did you mean threads?)");
  // A nested field given at the top level points into its table.
  EXPECT_EQ(Error(R"({"learning_rate": 0.1})"),
            "member m2: config.learning_rate: unknown field (did you mean "
            "optimizer.learning_rate?)");
  // Nothing close: no guess.
  EXPECT_EQ(Error(R"({"colour": "blue"})"), "member m2: config.colour: unknown field");
}

TEST(ConfigJsonTest, WrongTypesNameThePathAndTheValue) {
  EXPECT_EQ(Error(R"({"epochs": "ten"})"),
            "member m2: config.epochs: expected an integer, got \"ten\"");
  EXPECT_EQ(Error(R"({"epochs": 2.5})"), "member m2: config.epochs: expected an integer, got 2.5");
  EXPECT_EQ(Error(R"({"seed": -1})"),
            "member m2: config.seed: expected a non-negative integer, got -1");
  EXPECT_EQ(Error(R"({"device": {"threads": 99999999999}})"),
            "member m2: config.device.threads: expected an integer, got 99999999999 "
            "(out of range)");
  EXPECT_EQ(Error(R"({"model": 5})"), "member m2: config.model: expected a string, got 5");
  EXPECT_EQ(Error(R"({"standardize": 1})"),
            "member m2: config.standardize: expected true or false, got 1");
  EXPECT_EQ(Error(R"({"optimizer": {"learning_rate": "fast"}})"),
            "member m2: config.optimizer.learning_rate: expected a number, got \"fast\"");
  EXPECT_EQ(Error(R"({"optimizer": "sgd"})"),
            "member m2: config.optimizer: expected an object, got \"sgd\"");
  EXPECT_EQ(Error(R"({"warm_start_from": null})"),
            "member m2: config.warm_start_from: expected a string, got null");
  EXPECT_EQ(Error(R"([1, 2])"), "member m2: config: expected an object, got [1,2]");
  // Long values are cut short in the message.
  std::string long_value(500, 'x');
  std::string message = Error(R"({"epochs": ")" + long_value + R"("})");
  EXPECT_LT(message.size(), 120u) << message;
}

TEST(ConfigJsonTest, ErrorsNameTheMemberFromTheJsonWhenNotGiven) {
  auto c = TrainConfigFromJson(json{{"member", "m9"}, {"epochs", "x"}}, TrainConfig{}, "");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "member m9: config.epochs: expected an integer, got \"x\"");
}

}  // namespace
}  // namespace cohort::model
