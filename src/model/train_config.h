// A member's training settings (TrainConfig) and the one table that lists its fields.
//
// Plain structs with no libtorch and no store behind them: the loop's config, the CLI and
// worker commands fill them in; model::Train (member.h) consumes them. TrainConfigFields()
// names every field once, with its type, its range check and a line of documentation; the
// JSON form (config_json.h), the loop config's key checks and Train's own checks are all
// driven by it, so a new setting is one struct member plus one row in train_config.cc.
//
// Thread-safety: plain values; the table is built once, then read-only.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace cohort::model {

struct OptimizerConfig {
  std::string name = "adam";  // adam | adamw | sgd
  double learning_rate = 1e-3;
  double weight_decay = 0.0;  // L2 for adam and sgd, decoupled for adamw
  double momentum = 0.9;      // sgd
  double beta1 = 0.9;         // adam, adamw
  double beta2 = 0.999;
};

struct ScheduleConfig {
  std::string name = "constant";  // constant | step | cosine
  int64_t warmup_epochs = 0;      // linear warm-up from 0 over these epochs (stepwise)
  int64_t step_epochs = 10;       // step: multiply by gamma every step_epochs
  double gamma = 0.1;
  double min_learning_rate = 0.0;  // cosine: the floor at the last epoch
};

// Augmentation of image features while training (augment.h); all off by default.
struct AugmentConfig {
  int64_t shift = 0;  // shift by up to this many pixels each way (pad with 0 and crop)
  bool flip = false;  // flip left-right with probability 1/2
  double erase = 0;   // erase a random rectangle with this probability
  bool enabled() const { return shift > 0 || flip || erase > 0; }
};

struct DeviceConfig {
  std::string device = "cpu";  // cpu | cuda | cuda:N
  int threads = 1;             // intra-op threads on CPU
};

struct TrainConfig {
  std::string member = "member";  // names the member in errors and events
  std::string model;              // spec text (spec.h)
  // Classification: cross_entropy. Regression: mse or gaussian_nll. "auto" picks
  // cross_entropy for class labels and mse for vector labels.
  std::string loss = "auto";
  double label_smoothing = 0.0;
  // Classification: the class count; 0 takes one more than the largest label in the table
  // (give it when a class may be missing from a small training table).
  int64_t classes = 0;
  bool standardize = false;  // per-feature mean/std from the training table
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  double grad_clip_norm = 0.0;  // 0: off
  int64_t batch_size = 64;
  int64_t epochs = 10;
  uint64_t seed = 0;
  double validation_fraction = 0.0;  // held out of the table (seeded), for early stopping
  int64_t patience = 0;              // stop after this many epochs without a better val loss
  // Continue from this checkpoint's weights and optimizer state instead of fresh
  // initialisation (the member's previous round). Empty: fresh.
  std::string warm_start_from;
  AugmentConfig augment;
  // fp32, or bf16: the dense and convolution layers compute in bfloat16 (autocast: weights,
  // optimizer state and loss stay float32), in training and in the member's predictions.
  std::string precision = "fp32";
  // The precision of the member's pool predictions (acquisition's input): auto is the
  // member's precision; bf16 scores the pool in bfloat16 while training in fp32.
  std::string pool_precision = "auto";
  DeviceConfig device;
};

// A pointer to one field of a TrainConfig, typed as the field is.
using TrainFieldPtr = std::variant<std::string*, double*, bool*, int64_t*, uint64_t*, int*>;

struct TrainConfigField {
  // The field's name in JSON and loop.toml: "epochs", or "optimizer.learning_rate" for a
  // field of a nested struct.
  std::string path;
  std::string doc;  // one line: what the setting means
  std::function<TrainFieldPtr(TrainConfig& config)> field;
  // Why Train would refuse this field's value in `config` ("must be at least 1, got 0"), or
  // empty when it is acceptable. Only ranges and names: types are the field's own.
  std::function<std::string(const TrainConfig& config)> check;
};

// Every TrainConfig field, in declaration order, a nested struct's fields together where the
// struct is declared ("optimizer.*" right after "standardize").
const std::vector<TrainConfigField>& TrainConfigFields();

struct TrainConfigProblem {
  std::string path;  // a TrainConfigField path
  std::string message;
};

// "" when `precision` is one TrainConfig::precision takes (fp32, bf16), else why not:
// "unknown precision 'fp16' (fp32, bf16)". Checkpoints and predict commands use it too.
std::string CheckPrecision(const std::string& precision);

// The first field, in table order, whose value Train refuses; nullopt when there is none.
std::optional<TrainConfigProblem> CheckTrainConfig(const TrainConfig& config);

}  // namespace cohort::model
