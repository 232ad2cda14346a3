#include "loop/config/class_labels.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "model/spec.h"

namespace cohort::loop {

namespace {

constexpr size_t kIdsNamed = 5;

// "loop.toml:23: member[2] (name)".
std::string MemberWhere(const LoopConfig& config, size_t index) {
  return fmt::format("{}:{}: member[{}] ({})", config.path, config.members[index].line, index + 1,
                     config.members[index].name);
}

// The tables whose stored labels the run trains on, scores with or reveals.
std::vector<const std::string*> LabelledTables(const LoopConfig& config) {
  std::vector<const std::string*> names = {&config.store.train, &config.store.test};
  if (config.oracle.kind == OracleConfig::Kind::kHiddenLabels) names.push_back(&config.store.pool);
  return names;
}

// The output width of a native member's final `dense`, or 0 when its model says none.
int64_t FinalDenseUnits(const MemberConfig& member) {
  auto spec = model::ParseModelSpec(member.train.model, member.name);
  if (!spec.ok() || spec->layers.empty()) return 0;
  const model::LayerSpec& last = spec->layers.back();
  return last.kind == model::LayerKind::kDense ? last.units : 0;
}

std::string TableWhat(const store::Snapshot& snap, const std::string& name) {
  return fmt::format("table '{}' ({} generation {})", name, snap.dir(), snap.generation());
}

}  // namespace

std::vector<int64_t> ClassLabelsOf(const store::Table& table) {
  store::HostArray labels = table.ReadLabels();
  std::vector<int64_t> out(table.size());
  if (!out.empty()) std::memcpy(out.data(), labels.data.data(), out.size() * sizeof(int64_t));
  return out;
}

std::vector<float> TargetsOf(const store::Table& table) {
  store::HostArray labels = table.ReadLabels();
  std::vector<float> out(labels.data.size() / sizeof(float));
  if (!out.empty()) std::memcpy(out.data(), labels.data.data(), out.size() * sizeof(float));
  return out;
}

Status CheckClassLabels(const std::string& what, std::span<const int64_t> labels,
                        std::span<const uint64_t> ids, int64_t classes, const std::string& hint) {
  size_t bad = 0;
  std::string named;
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= 0 && labels[i] < classes) continue;
    if (++bad <= kIdsNamed) {
      named +=
          fmt::format("{}sample id {} (label {})", named.empty() ? "" : ", ", ids[i], labels[i]);
    }
  }
  if (bad == 0) return Status::OK();
  return Status::InvalidArgument(fmt::format("{}: {} label(s) outside [0, {}) at {}{}{}", what, bad,
                                             classes, named, bad > kIdsNamed ? ", ..." : "",
                                             hint.empty() ? "" : "; " + hint));
}

Result<int64_t> RunClassCount(const LoopConfig& config, const store::Snapshot& snap) {
  int64_t configured = 0;
  size_t configured_by = 0;
  for (size_t i = 0; i < config.members.size(); ++i) {
    int64_t c = config.members[i].is_script() ? 0 : config.members[i].train.classes;
    if (c <= 0) continue;
    if (configured > 0 && c != configured) {
      return Status::InvalidArgument(fmt::format(
          "{}.classes: {} classes, but {} has {}: every member of a run predicts the same classes",
          MemberWhere(config, i), c, MemberWhere(config, configured_by), configured));
    }
    configured = c;
    configured_by = i;
  }
  // Without `classes`, the members' final `dense N` says the same thing: a train table that
  // holds only some of the classes yet must not shrink the output layer.
  bool from_model = false;
  for (size_t i = 0; configured == 0 && i < config.members.size(); ++i) {
    if (config.members[i].is_script()) continue;
    int64_t units = FinalDenseUnits(config.members[i]);
    if (units <= 0) continue;
    for (size_t j = i + 1; j < config.members.size(); ++j) {
      if (config.members[j].is_script()) continue;
      int64_t other = FinalDenseUnits(config.members[j]);
      if (other > 0 && other != units) {
        return Status::InvalidArgument(fmt::format(
            "{}.model: the final layer has {} units, but {} ends in {}: every member of a run "
            "predicts the same classes (set `classes` in [defaults] to say how many)",
            MemberWhere(config, j), other, MemberWhere(config, i), units));
      }
    }
    configured = units;
    configured_by = i;
    from_model = true;
  }
  std::vector<std::pair<const std::string*, std::vector<int64_t>>> tables;
  for (const std::string* name : LabelledTables(config)) {
    COHORT_ASSIGN_OR_RETURN(const store::Table* table, snap.table(*name));
    if (table->schema().label_kind != store::LabelKind::kClass) continue;  // config_check's job
    tables.emplace_back(name, ClassLabelsOf(*table));
  }
  int64_t classes = configured;
  std::string hint = "labels are class indices 0..classes-1";
  if (configured > 0) {
    hint = from_model ? fmt::format("the members' final layer has {} units ({}.model)", configured,
                                    MemberWhere(config, configured_by))
                      : fmt::format("the members' `classes` is {} ({})", configured,
                                    MemberWhere(config, configured_by));
  } else {
    // Negative labels are reported below, by the range check.
    for (const auto& [name, labels] : tables) {
      for (int64_t label : labels) classes = std::max(classes, label + 1);
    }
    classes = std::max<int64_t>(classes, 2);
    if (classes > kMaxInferredClasses) {
      classes = kMaxInferredClasses;
      hint = fmt::format(
          "labels are class indices 0..classes-1; a run with more than {} classes gives "
          "`classes` on its members",
          kMaxInferredClasses);
    }
  }
  for (const auto& [name, labels] : tables) {
    COHORT_ASSIGN_OR_RETURN(const store::Table* table, snap.table(*name));
    std::vector<uint64_t> ids = table->Ids();
    COHORT_RETURN_IF_ERROR(CheckClassLabels(TableWhat(snap, *name), labels, ids, classes, hint));
  }
  return classes;
}

}  // namespace cohort::loop
