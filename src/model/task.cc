#include "model/task.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/json_text.h"

namespace cohort::model {

using nlohmann::json;

namespace {

std::vector<int64_t> ToInt64(const std::vector<uint64_t>& v) {
  return std::vector<int64_t>(v.begin(), v.end());
}

uint64_t Below(std::mt19937_64& rng, uint64_t range) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % range;
  uint64_t r;
  do {
    r = rng();
  } while (r >= limit);
  return r % range;
}

}  // namespace

int64_t MemberMeta::target_size() const {
  int64_t n = 1;
  for (int64_t d : target_shape) n *= d;
  return n;
}

json MemberMeta::ToJson() const {
  return {{"format", "cohort-checkpoint"},
          {"version", kCheckpointVersion},
          {"member", member},
          {"model", model},
          {"task", task},
          {"loss", loss},
          {"feature_dtype", feature_dtype},
          {"input_shape", input_shape},
          {"target_shape", target_shape},
          {"classes", classes},
          {"outputs", outputs},
          {"standardize", standardize},
          {"precision", precision},
          {"residual_variance", residual_variance},
          {"training", training}};
}

Result<MemberMeta> MemberMeta::FromJson(const json& j, const std::string& path) {
  MemberMeta m;
  try {
    if (j.at("format").get<std::string>() != "cohort-checkpoint") {
      return Status::Corruption(path + ": not a cohort checkpoint");
    }
    const int64_t version = JsonInt(j.at("version"));
    if (version != kCheckpointVersion) {
      return Status::Corruption(path + ": checkpoint version " + std::to_string(version) +
                                " is not supported");
    }
    m.member = j.at("member").get<std::string>();
    m.model = j.at("model").get<std::string>();
    m.task = j.at("task").get<std::string>();
    m.loss = j.at("loss").get<std::string>();
    m.feature_dtype = j.at("feature_dtype").get<std::string>();
    m.input_shape = JsonIntArray(j.at("input_shape"), 0);
    m.target_shape = JsonIntArray(j.at("target_shape"), 0);
    m.classes = JsonInt(j.at("classes"), 0);
    m.outputs = JsonInt(j.at("outputs"), 0);
    m.standardize = j.at("standardize").get<bool>();
    // Checkpoints written before the setting existed trained in fp32.
    m.precision = j.value("precision", std::string("fp32"));
    if (!CheckPrecision(m.precision).empty()) {
      return Status::Corruption(path + ": unknown precision '" + m.precision + "'");
    }
    m.residual_variance = j.at("residual_variance").get<std::vector<double>>();
    m.training = j.value("training", json::object());
  } catch (const json::exception& e) {
    return Status::Corruption(path + ": bad checkpoint description: " + std::string(e.what()));
  }
  return m;
}

Result<MemberMeta> DescribeTask(const store::Table& table, const TrainConfig& config) {
  const std::string who = "member " + config.member + ": table " + table.name();
  const store::TableSchema& schema = table.schema();
  MemberMeta m;
  m.member = config.member;
  m.model = config.model;
  m.standardize = config.standardize;
  m.precision = config.precision;
  m.feature_dtype = store::DtypeName(schema.feature_dtype);
  m.input_shape = ToInt64(schema.feature_shape);
  if (schema.label_kind == store::LabelKind::kNone) {
    return Status::InvalidArgument(who + " has no labels to train on");
  }
  if (schema.label_kind == store::LabelKind::kClass) {
    m.task = "classification";
    m.loss = config.loss == "auto" ? "cross_entropy" : config.loss;
    if (m.loss != "cross_entropy") {
      return Status::InvalidArgument("member " + config.member + ": loss '" + config.loss +
                                     "' does not fit class labels (use cross_entropy)");
    }
    int64_t max_label = -1;
    for (uint64_t r = 0; r < table.size(); r++) {
      int64_t label;
      std::memcpy(&label, table.label(r), sizeof(label));
      if (label < 0) {
        return Status::InvalidArgument(who + ": sample id " + std::to_string(table.id(r)) +
                                       " has negative class label " + std::to_string(label));
      }
      max_label = std::max(max_label, label);
    }
    m.classes = config.classes > 0 ? config.classes : max_label + 1;
    if (max_label >= m.classes) {
      return Status::InvalidArgument(who + ": class label " + std::to_string(max_label) +
                                     " is outside the " + std::to_string(m.classes) +
                                     " classes configured");
    }
    if (m.classes < 2) {
      return Status::InvalidArgument(who + ": needs at least 2 classes (set classes = N)");
    }
    m.outputs = m.classes;
  } else {
    m.task = "regression";
    m.loss = config.loss == "auto" ? "mse" : config.loss;
    if (m.loss != "mse" && m.loss != "gaussian_nll") {
      return Status::InvalidArgument("member " + config.member + ": loss '" + config.loss +
                                     "' does not fit regression targets (mse, gaussian_nll)");
    }
    m.target_shape = ToInt64(schema.label_shape);
    m.outputs = m.target_size() * (m.loss == "gaussian_nll" ? 2 : 1);
  }
  return m;
}

Status CheckCompatible(const MemberMeta& meta, const store::Table& table, bool need_labels) {
  const store::TableSchema& s = table.schema();
  if (meta.feature_dtype != store::DtypeName(s.feature_dtype) ||
      meta.input_shape != ToInt64(s.feature_shape)) {
    return Status::InvalidArgument("member " + meta.member + " was trained on features " +
                                   meta.feature_dtype + " of another shape than table " +
                                   table.name() + " (" + s.ToString() + ")");
  }
  if (!need_labels) return Status::OK();
  bool class_labels = s.label_kind == store::LabelKind::kClass;
  bool vector_labels = s.label_kind == store::LabelKind::kVector;
  if ((meta.classification() && !class_labels) ||
      (!meta.classification() && (!vector_labels || ToInt64(s.label_shape) != meta.target_shape))) {
    return Status::InvalidArgument("member " + meta.member + " (" + meta.task +
                                   ") cannot be evaluated on table " + table.name() + " (" +
                                   s.ToString() + ")");
  }
  return Status::OK();
}

void SplitRows(uint64_t n, double fraction, std::mt19937_64& rng, std::vector<uint64_t>* train,
               std::vector<uint64_t>* held_out) {
  const auto k = static_cast<uint64_t>(std::llround(fraction * static_cast<double>(n)));
  std::vector<uint64_t> all(n);
  for (uint64_t i = 0; i < n; i++) all[i] = i;
  for (uint64_t i = 0; i < k; i++) std::swap(all[i], all[i + Below(rng, n - i)]);
  held_out->assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(k));
  train->assign(all.begin() + static_cast<std::ptrdiff_t>(k), all.end());
  std::sort(held_out->begin(), held_out->end());
  std::sort(train->begin(), train->end());
}

std::vector<uint64_t> Shuffled(const std::vector<uint64_t>& rows, std::mt19937_64& rng) {
  std::vector<uint64_t> out = rows;
  for (uint64_t i = out.size(); i > 1; i--) std::swap(out[i - 1], out[Below(rng, i)]);
  return out;
}

}  // namespace cohort::model
