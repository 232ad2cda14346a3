#include "model/train_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <variant>

namespace cohort::model {
namespace {

// The problem CheckTrainConfig finds in `c`, as "path: message" ("" when none).
std::string Problem(const TrainConfig& c) {
  auto p = CheckTrainConfig(c);
  return p ? p->path + ": " + p->message : "";
}

TEST(TrainConfigTest, EveryRowNamesItsOwnField) {
  std::set<std::string> paths;
  std::set<const void*> addresses;
  TrainConfig c;
  for (const TrainConfigField& f : TrainConfigFields()) {
    EXPECT_TRUE(paths.insert(f.path).second) << f.path << " is listed twice";
    EXPECT_FALSE(f.doc.empty()) << f.path;
    const void* at = std::visit([](auto* p) -> const void* { return p; }, f.field(c));
    EXPECT_TRUE(addresses.insert(at).second) << f.path << " points at another row's field";
  }
  EXPECT_EQ(paths.size(), 31u);
  EXPECT_TRUE(paths.count("precision"));
  EXPECT_TRUE(paths.count("pool_precision"));
  EXPECT_TRUE(paths.count("augment.shift"));
  EXPECT_TRUE(paths.count("optimizer.learning_rate"));
  EXPECT_TRUE(paths.count("device.threads"));
}

TEST(TrainConfigTest, DefaultsPass) { EXPECT_EQ(Problem(TrainConfig{}), ""); }

TEST(TrainConfigTest, ChecksNameTheFieldAndTheRule) {
  auto with = [](auto change) {
    TrainConfig c;
    change(c);
    return Problem(c);
  };
  EXPECT_EQ(with([](TrainConfig& c) { c.epochs = 0; }), "epochs: must be at least 1, got 0");
  EXPECT_EQ(with([](TrainConfig& c) { c.batch_size = -5; }),
            "batch_size: must be at least 1, got -5");
  EXPECT_EQ(with([](TrainConfig& c) { c.optimizer.name = "lion"; }),
            "optimizer.name: unknown optimizer 'lion' (adam, adamw, sgd)");
  EXPECT_EQ(with([](TrainConfig& c) { c.schedule.name = "linear"; }),
            "schedule.name: unknown schedule 'linear' (constant, step, cosine)");
  EXPECT_EQ(with([](TrainConfig& c) { c.loss = "hinge"; }),
            "loss: unknown loss 'hinge' (auto, cross_entropy, mse, gaussian_nll)");
  EXPECT_EQ(with([](TrainConfig& c) { c.optimizer.learning_rate = 0; }),
            "optimizer.learning_rate: must be > 0");
  EXPECT_EQ(with([](TrainConfig& c) { c.optimizer.learning_rate = NAN; }),
            "optimizer.learning_rate: must be > 0");
  EXPECT_EQ(with([](TrainConfig& c) { c.validation_fraction = 1; }),
            "validation_fraction: must be in [0, 1)");
  EXPECT_EQ(with([](TrainConfig& c) { c.label_smoothing = -0.1; }),
            "label_smoothing: must be in [0, 1)");
  EXPECT_EQ(with([](TrainConfig& c) { c.classes = -1; }),
            "classes: must be >= 0 (0: from the labels)");
  EXPECT_EQ(with([](TrainConfig& c) { c.patience = -1; }), "patience: must be >= 0");
  EXPECT_EQ(with([](TrainConfig& c) { c.optimizer.weight_decay = -1; }),
            "optimizer.weight_decay: must be >= 0");
  EXPECT_EQ(with([](TrainConfig& c) { c.schedule.step_epochs = 0; }),
            "schedule.step_epochs: must be at least 1, got 0");
  EXPECT_EQ(with([](TrainConfig& c) { c.schedule.warmup_epochs = -2; }),
            "schedule.warmup_epochs: must be >= 0");
  EXPECT_EQ(with([](TrainConfig& c) { c.grad_clip_norm = -1; }), "grad_clip_norm: must be >= 0");
  EXPECT_EQ(with([](TrainConfig& c) { c.device.threads = 0; }),
            "device.threads: must be at least 1, got 0");
  // The first problem in table order wins.
  EXPECT_EQ(with([](TrainConfig& c) {
              c.epochs = 0;
              c.loss = "hinge";
            }),
            "loss: unknown loss 'hinge' (auto, cross_entropy, mse, gaussian_nll)");
}

}  // namespace
}  // namespace cohort::model
