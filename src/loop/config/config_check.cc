#include "loop/config/config_check.h"

#include <fmt/format.h>

#include <algorithm>

#include "loop/acquire/strategy.h"
#include "loop/ensemble/predictions.h"
#include "loop/ensemble/regression.h"
#include "model/augment.h"
#include "model/spec.h"
#include "model/task.h"

namespace cohort::loop {

namespace {

// "loop.toml:23: member[2]" for messages about a member.
std::string MemberWhere(const LoopConfig& config, size_t index) {
  return fmt::format("{}:{}: member[{}]", config.path, config.members[index].line, index + 1);
}

// "loop.toml:25: member[2].model" (or "defaults.model"): where the member's model is set.
std::string ModelWhere(const LoopConfig& config, size_t index) {
  const MemberConfig& m = config.members[index];
  if (m.model_line == 0 || m.model_field.empty()) return MemberWhere(config, index) + ".model";
  return fmt::format("{}:{}: {}", config.path, m.model_line, m.model_field);
}

// The strategy, the update steps and the stop target must fit the run's kind and store: a
// classification strategy has no class probabilities to score in a regression run, a
// pseudo-label needs classes, import_new a table to join, and a target the run never computes
// would never end it.
Status CheckRunKindFits(const LoopConfig& config, const RunTask& task,
                        const store::Snapshot& snap) {
  const std::vector<std::string> strategies = StrategyNames(
      task.regression ? StrategyTask::kRegression : StrategyTask::kClassification);
  const AcquisitionConfig& acquisition = config.acquisition;
  for (const auto& [field, strategy] :
       {std::pair<std::string, std::string>{"strategy", acquisition.strategy},
        {"cold_start_strategy",
         acquisition.cold_start_rounds > 0 ? acquisition.cold_start_strategy : ""}}) {
    if (HasAcquireStep(config) && !strategy.empty() &&
        std::find(strategies.begin(), strategies.end(), strategy) == strategies.end()) {
      std::string names;
      for (const auto& s : strategies) names += (names.empty() ? "" : ", ") + s;
      return Status::InvalidArgument(fmt::format(
          "{}: acquisition.{}: '{}' does not fit a {} (the train table '{}' decides); one of {}",
          config.path, field, strategy, task.Describe(), config.store.train, names));
    }
  }
  for (size_t i = 0; i < config.members.size(); ++i) {
    if (config.members[i].dropout_passes > 0 && task.regression) {
      return Status::InvalidArgument(fmt::format(
          "{}.dropout_passes: MC-dropout passes sample class probabilities, and a {} has no "
          "classes",
          MemberWhere(config, i), task.Describe()));
    }
  }
  for (const UpdateStepConfig& u : config.updates) {
    if (u.kind == UpdateStepConfig::Kind::kImportNew && !snap.has_table(u.table)) {
      return Status::InvalidArgument(fmt::format(
          "{}:{}: update: import_new: table '{}' is not in the store (create it with `cohort data "
          "import`, so its features and labels have a schema the new files must match)",
          config.path, u.line, u.table));
    }
    if (u.kind == UpdateStepConfig::Kind::kPseudoLabel && task.regression) {
      return Status::InvalidArgument(fmt::format(
          "{}:{}: update: pseudo_label gives pool samples the ensemble's class, and a {} has "
          "no classes",
          config.path, u.line, task.Describe()));
    }
    if (u.kind == UpdateStepConfig::Kind::kRelabelOrDrop && task.regression) {
      return Status::InvalidArgument(fmt::format(
          "{}:{}: update: relabel_or_drop judges a stored class by the ensemble's probability "
          "of it, and a {} has no classes (a command step with predict = [\"train\"] can "
          "curate regression targets)",
          config.path, u.line, task.Describe()));
    }
  }
  if (config.stop.target) {
    static const std::vector<std::string> kClassification{"accuracy", "nll", "brier", "ece"};
    static const std::vector<std::string> kRegression{"rmse", "mae", "nll", "calibration_error"};
    const auto& metrics = task.regression ? kRegression : kClassification;
    const std::string& metric = config.stop.target->metric;
    if (std::find(metrics.begin(), metrics.end(), metric) == metrics.end()) {
      std::string names;
      for (const auto& s : metrics) names += (names.empty() ? "" : ", ") + s;
      return Status::InvalidArgument(fmt::format(
          "{}: stop.target.metric: a {} never computes '{}', so the target could never end "
          "it; one of {}",
          config.path, task.Describe(), metric, names));
    }
  }
  return Status::OK();
}

}  // namespace

Status CheckConfigAgainstStore(const LoopConfig& config, const store::Snapshot& snap) {
  const std::string where = config.path + ": store";
  std::string store_desc = fmt::format("{} generation {}", snap.dir(), snap.generation());
  for (const std::string* name : {&config.store.train, &config.store.pool, &config.store.test}) {
    if (!snap.has_table(*name)) {
      std::string tables;
      for (const std::string& t : snap.table_names()) tables += (tables.empty() ? "" : ", ") + t;
      return Status::InvalidArgument(fmt::format("{}: table '{}' is not in {} (its tables: {})",
                                                 where, *name, store_desc, tables));
    }
  }
  const store::Table* train = *snap.table(config.store.train);
  const store::Table* pool = *snap.table(config.store.pool);
  const store::Table* test = *snap.table(config.store.test);
  if (!train->schema().has_labels()) {
    return Status::InvalidArgument(
        fmt::format("{}.train: table '{}' has {}: the members need labels to train on", where,
                    config.store.train, train->schema().ToString()));
  }
  const RunTask task = RunTaskOf(*train);
  if (test->schema().label_kind != train->schema().label_kind ||
      test->schema().label_shape != train->schema().label_shape) {
    return Status::InvalidArgument(fmt::format(
        "{}.test: table '{}' has {} but the train table '{}' has {}: the ensemble is scored "
        "against labels of the kind it learns",
        where, config.store.test, test->schema().ToString(), config.store.train,
        train->schema().ToString()));
  }
  COHORT_RETURN_IF_ERROR(CheckRunKindFits(config, task, snap));
  for (const store::Table* t : {pool, test}) {
    if (t->schema().feature_dtype != train->schema().feature_dtype ||
        t->schema().feature_shape != train->schema().feature_shape) {
      return Status::InvalidArgument(
          fmt::format("{}: table '{}' has {} but the train table '{}' has {}", where, t->name(),
                      t->schema().ToString(), train->name(), train->schema().ToString()));
    }
  }
  // Only the acquire step asks the hidden_labels oracle (relabel_or_drop needs a command one).
  const bool hidden =
      config.oracle.kind == OracleConfig::Kind::kHiddenLabels && HasAcquireStep(config);
  if (hidden && !pool->schema().has_labels()) {
    return Status::InvalidArgument(fmt::format(
        "{}: oracle: hidden_labels needs the pool table '{}' to store labels, but it has {}",
        config.path, config.store.pool, pool->schema().ToString()));
  }
  if (hidden && (pool->schema().label_kind != train->schema().label_kind ||
                 pool->schema().label_shape != train->schema().label_shape)) {
    return Status::InvalidArgument(fmt::format(
        "{}: oracle: hidden_labels moves the pool table's labels into the train table, but '{}' "
        "has {} and '{}' has {}",
        config.path, config.store.pool, pool->schema().ToString(), config.store.train,
        train->schema().ToString()));
  }
  if (train->size() == 0) {
    return Status::InvalidArgument(
        fmt::format("{}.train: table '{}' is empty in {}", where, config.store.train, store_desc));
  }
  for (size_t i = 0; i < config.members.size(); ++i) {
    const MemberConfig& m = config.members[i];
    if (m.is_script()) continue;  // its settings are the script's own
    auto meta = model::DescribeTask(*train, m.train);
    if (!meta.ok()) {
      return Status::InvalidArgument(MemberWhere(config, i) + ": " + meta.status().message());
    }
    auto spec = model::ParseModelSpec(m.train.model, m.name);
    if (!spec.ok()) {
      return Status::InvalidArgument(ModelWhere(config, i) + ": " + spec.status().message());
    }
    auto shapes = model::InferShapes(*spec, meta->input_shape, meta->outputs, m.name);
    if (!shapes.ok()) {
      return Status::InvalidArgument(ModelWhere(config, i) + ": " + shapes.status().message());
    }
    if (std::string why = model::CheckAugmentShape(m.train.augment, train->schema().feature_shape);
        !why.empty()) {
      return Status::InvalidArgument(MemberWhere(config, i) + ".augment: " + why);
    }
  }
  return Status::OK();
}

}  // namespace cohort::loop
