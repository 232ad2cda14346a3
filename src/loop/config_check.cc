#include "loop/config_check.h"

#include <fmt/format.h>

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
  if (train->schema().label_kind != store::LabelKind::kClass) {
    return Status::InvalidArgument(fmt::format(
        "{}.train: table '{}' has {}: the loop's acquisition and metrics need class labels", where,
        config.store.train, train->schema().ToString()));
  }
  if (test->schema().label_kind != store::LabelKind::kClass) {
    return Status::InvalidArgument(fmt::format("{}.test: table '{}' has {}: it needs class labels",
                                               where, config.store.test,
                                               test->schema().ToString()));
  }
  for (const store::Table* t : {pool, test}) {
    if (t->schema().feature_dtype != train->schema().feature_dtype ||
        t->schema().feature_shape != train->schema().feature_shape) {
      return Status::InvalidArgument(
          fmt::format("{}: table '{}' has {} but the train table '{}' has {}", where, t->name(),
                      t->schema().ToString(), train->name(), train->schema().ToString()));
    }
  }
  if (config.oracle.kind == OracleConfig::Kind::kHiddenLabels && !pool->schema().has_labels()) {
    return Status::InvalidArgument(fmt::format(
        "{}: oracle: hidden_labels needs the pool table '{}' to store labels, but it has {}",
        config.path, config.store.pool, pool->schema().ToString()));
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
  }
  return Status::OK();
}

}  // namespace cohort::loop
