#include "model/train_config.h"

#include <initializer_list>

namespace cohort::model {

namespace {

// The field of `c` that member pointers `Members` lead to: (c.*M1).*M2 ...
template <auto... Members, typename Config>
auto& At(Config& c) {
  return (c.*....*Members);
}

// A row of the table: Field<&TrainConfig::epochs>(...) or, for a field of a nested struct,
// Field<&TrainConfig::optimizer, &OptimizerConfig::name>(...).
template <auto... Members, typename Check>
TrainConfigField Field(const char* path, Check check, const char* doc) {
  return {path, doc, [](TrainConfig& c) -> TrainFieldPtr { return &At<Members...>(c); },
          [check](const TrainConfig& c) -> std::string { return check(At<Members...>(c)); }};
}

template <auto... Members>
TrainConfigField Field(const char* path, const char* doc) {
  return Field<Members...>(
      path, [](const auto&) { return std::string(); }, doc);
}

// Checks: each gives why a value is refused, or "" when it is fine. Comparisons are written
// so that NaN fails them.

auto AtLeast(int64_t min) {
  return [min](auto v) -> std::string {
    if (v >= min) return "";
    return "must be at least " + std::to_string(min) + ", got " + std::to_string(v);
  };
}

auto NotNegative(const char* note = "") {
  return [note](auto v) -> std::string {
    if (v >= 0) return "";
    return std::string("must be >= 0") + note;
  };
}

auto Positive() {
  return [](double v) -> std::string { return v > 0 ? "" : "must be > 0"; };
}

auto Fraction() {
  return [](double v) -> std::string { return v >= 0 && v < 1 ? "" : "must be in [0, 1)"; };
}

// "unknown optimizer 'lion' (adam, adamw, sgd)"
auto OneOf(const char* what, std::initializer_list<const char*> names) {
  std::vector<std::string> known(names.begin(), names.end());
  return [what, known](const std::string& v) -> std::string {
    std::string list;
    for (const auto& name : known) {
      if (v == name) return "";
      list += (list.empty() ? "" : ", ") + name;
    }
    return std::string("unknown ") + what + " '" + v + "' (" + list + ")";
  };
}

std::vector<TrainConfigField> MakeFields() {
  return {
      Field<&TrainConfig::member>("member", "names the member in errors and events"),
      Field<&TrainConfig::model>("model", "the layer spec (models.md)"),
      Field<&TrainConfig::loss>(
          "loss", OneOf("loss", {"auto", "cross_entropy", "mse", "gaussian_nll"}),
          "auto picks cross_entropy for class labels and mse for vector labels"),
      Field<&TrainConfig::label_smoothing>(
          "label_smoothing", Fraction(),
          "cross_entropy: share of the target spread over all classes"),
      Field<&TrainConfig::classes>("classes", NotNegative(" (0: from the labels)"),
                                   "the class count; 0 takes one more than the largest label"),
      Field<&TrainConfig::standardize>(
          "standardize", "standardise features with the training table's per-feature mean and std"),
      Field<&TrainConfig::optimizer, &OptimizerConfig::name>(
          "optimizer.name", OneOf("optimizer", {"adam", "adamw", "sgd"}),
          "adam, adamw (decoupled weight decay) or sgd"),
      Field<&TrainConfig::optimizer, &OptimizerConfig::learning_rate>(
          "optimizer.learning_rate", Positive(), "the base learning rate"),
      Field<&TrainConfig::optimizer, &OptimizerConfig::weight_decay>(
          "optimizer.weight_decay", NotNegative(), "L2 for adam and sgd, decoupled for adamw"),
      Field<&TrainConfig::optimizer, &OptimizerConfig::momentum>("optimizer.momentum",
                                                                 "sgd momentum"),
      Field<&TrainConfig::optimizer, &OptimizerConfig::beta1>("optimizer.beta1",
                                                              "adam and adamw: first moment decay"),
      Field<&TrainConfig::optimizer, &OptimizerConfig::beta2>(
          "optimizer.beta2", "adam and adamw: second moment decay"),
      Field<&TrainConfig::schedule, &ScheduleConfig::name>(
          "schedule.name", OneOf("schedule", {"constant", "step", "cosine"}),
          "constant; step (times gamma every step_epochs); cosine (to min_learning_rate)"),
      Field<&TrainConfig::schedule, &ScheduleConfig::warmup_epochs>(
          "schedule.warmup_epochs", NotNegative(),
          "linear warm-up from 0 over these epochs, step by step"),
      Field<&TrainConfig::schedule, &ScheduleConfig::step_epochs>(
          "schedule.step_epochs", AtLeast(1), "step: epochs between decays"),
      Field<&TrainConfig::schedule, &ScheduleConfig::gamma>("schedule.gamma",
                                                            "step: the decay factor"),
      Field<&TrainConfig::schedule, &ScheduleConfig::min_learning_rate>(
          "schedule.min_learning_rate", "cosine: the rate at the last epoch"),
      Field<&TrainConfig::grad_clip_norm>("grad_clip_norm", NotNegative(),
                                          "clip the global gradient norm (0: off)"),
      Field<&TrainConfig::batch_size>("batch_size", AtLeast(1), "rows per training step"),
      Field<&TrainConfig::epochs>("epochs", AtLeast(1), "passes over the training rows"),
      Field<&TrainConfig::seed>("seed",
                                "initial weights, dropout, shuffling and the validation split"),
      Field<&TrainConfig::validation_fraction>("validation_fraction", Fraction(),
                                               "seeded share of the table held out for validation"),
      Field<&TrainConfig::patience>(
          "patience", NotNegative(),
          "stop after this many epochs without a better validation loss (0: off)"),
      Field<&TrainConfig::warm_start_from>(
          "warm_start_from",
          "continue from this checkpoint's weights and optimizer state (empty: fresh)"),
      Field<&TrainConfig::augment, &AugmentConfig::shift>(
          "augment.shift", NotNegative(),
          "image members: shift each training image by up to this many pixels (0: off)"),
      Field<&TrainConfig::augment, &AugmentConfig::flip>(
          "augment.flip",
          "image members: flip each training image left-right with probability 1/2"),
      Field<&TrainConfig::augment, &AugmentConfig::erase>(
          "augment.erase", Fraction(),
          "image members: erase a random rectangle of each training image with this probability"),
      Field<&TrainConfig::precision>(
          "precision", [](const std::string& v) { return CheckPrecision(v); },
          "fp32, or bf16: dense and convolution layers in bfloat16 (training and prediction)"),
      Field<&TrainConfig::pool_precision>(
          "pool_precision", OneOf("pool precision", {"auto", "fp32", "bf16"}),
          "the pool predictions' precision (auto: the member's precision)"),
      Field<&TrainConfig::device, &DeviceConfig::device>("device.device", "cpu, cuda or cuda:N"),
      Field<&TrainConfig::device, &DeviceConfig::threads>("device.threads", AtLeast(1),
                                                          "intra-op threads on CPU"),
  };
}

}  // namespace

std::string CheckPrecision(const std::string& precision) {
  return OneOf("precision", {"fp32", "bf16"})(precision);
}

const std::vector<TrainConfigField>& TrainConfigFields() {
  static const std::vector<TrainConfigField> fields = MakeFields();
  return fields;
}

std::optional<TrainConfigProblem> CheckTrainConfig(const TrainConfig& config) {
  for (const TrainConfigField& f : TrainConfigFields()) {
    std::string why = f.check(config);
    if (!why.empty()) return TrainConfigProblem{f.path, why};
  }
  return std::nullopt;
}

}  // namespace cohort::model
