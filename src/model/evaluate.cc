// Evaluate(), Predict() and DescribeCheckpoint(): a trained member applied to a table.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/batch_pipeline.h"
#include "model/checkpoint.h"
#include "model/member.h"
#include "model/tensors.h"
#include "store/import.h"

namespace cohort::model {

namespace {

std::vector<uint64_t> AllRows(const store::Table& table) {
  std::vector<uint64_t> rows(table.size());
  for (uint64_t i = 0; i < rows.size(); i++) rows[i] = i;
  return rows;
}

struct Applied {
  LoadedCheckpoint member;
  torch::Tensor outputs;  // log-probabilities, or raw regression outputs, on the CPU
  torch::Tensor labels;
};

Result<Applied> Apply(const std::string& checkpoint, const store::Snapshot& snapshot,
                      const std::string& table_name, const DeviceConfig& device_config,
                      bool with_labels, const std::vector<uint64_t>& rows,
                      const std::string& precision = "") {
  COHORT_ASSIGN_OR_RETURN(const store::Table* table, snapshot.table(table_name));
  COHORT_ASSIGN_OR_RETURN(torch::Device device, ParseDevice(device_config.device));
  at::set_num_threads(std::max(device_config.threads, 1));
  TuneAllocator();
  Applied out;
  COHORT_ASSIGN_OR_RETURN(out.member, LoadCheckpoint(checkpoint, device));
  COHORT_RETURN_IF_ERROR(CheckCompatible(out.member.meta, *table, with_labels));
  if (!precision.empty()) out.member.meta.precision = precision;
  return GuardTorch("member " + out.member.meta.member, [&]() -> Result<Applied> {
    COHORT_ASSIGN_OR_RETURN(
        auto source, MakeBatchSource(snapshot.dir(), *table, out.member.meta, device, with_labels,
                                     PassBatchRows(*table, &out.member.meta, device)));
    COHORT_ASSIGN_OR_RETURN(auto run,
                            RunOver(out.member.net, *source, rows, out.member.meta, with_labels));
    out.outputs = run.first;
    out.labels = run.second;
    return std::move(out);
  });
}

// "sample id 7: -1, sample id 9: 12 (2 samples)": the table's rows where `mask` (bool, (n,))
// is set, the first five with their `values` (or without, when undefined), and the count.
std::string DescribeRows(const store::Table& table, const torch::Tensor& mask,
                         const torch::Tensor& values) {
  torch::Tensor rows = mask.nonzero().view({-1}).to(torch::kLong).contiguous();
  const int64_t count = rows.size(0);
  const int64_t* r = rows.data_ptr<int64_t>();
  std::string s;
  for (int64_t i = 0; i < count && i < 5; i++) {
    s += (i > 0 ? ", " : "") + std::string("sample id ") +
         std::to_string(table.id(static_cast<uint64_t>(r[i])));
    if (values.defined()) s += ": " + std::to_string(values[r[i]].item<int64_t>());
  }
  return s + " (" + std::to_string(count) + (count == 1 ? " sample)" : " samples)");
}

// Class labels the member cannot score (negative, or beyond its classes) are named by sample
// id, instead of reaching a gather as an index.
Status CheckLabelsFitMember(const store::Table& table, const torch::Tensor& labels,
                            const MemberMeta& meta) {
  torch::Tensor bad = labels.lt(0).logical_or(labels.ge(meta.classes));
  if (!bad.any().item<bool>()) return Status::OK();
  return Status::InvalidArgument("table " + table.name() + ": class labels must be in [0, " +
                                 std::to_string(meta.classes) + ") for member " + meta.member +
                                 "; " + DescribeRows(table, bad, labels));
}

Result<std::map<std::string, double>> ClassificationMetrics(const store::Table& table,
                                                            const MemberMeta& meta,
                                                            const torch::Tensor& log_probs,
                                                            const torch::Tensor& labels) {
  const int64_t n = log_probs.size(0);
  std::map<std::string, double> m;
  m["count"] = static_cast<double>(n);
  if (n == 0) return m;
  torch::Tensor logp = log_probs.to(torch::kDouble);
  torch::Tensor p = logp.exp();
  // NaN never becomes an index (an ECE bin below): outputs that are not probabilities come
  // from NaN or infinite features, or a member whose weights diverged.
  torch::Tensor not_finite = p.isfinite().logical_not().any(1);
  if (not_finite.any().item<bool>()) {
    return Status::InvalidArgument("member " + meta.member + " outputs NaN or infinity on table " +
                                   table.name() + " for " +
                                   DescribeRows(table, not_finite, torch::Tensor()) +
                                   " (NaN or infinite features, or diverged weights)");
  }
  torch::Tensor confidence;
  torch::Tensor predicted;
  std::tie(confidence, predicted) = p.max(1);
  torch::Tensor correct = predicted.eq(labels).to(torch::kDouble);
  torch::Tensor logp_true = logp.gather(1, labels.unsqueeze(1)).squeeze(1);
  torch::Tensor onehot = torch::zeros_like(p).scatter_(1, labels.unsqueeze(1), 1.0);
  m["accuracy"] = correct.mean().item<double>();
  m["nll"] = -logp_true.mean().item<double>();
  m["brier"] = (p - onehot).pow(2).sum(1).mean().item<double>();
  // Expected calibration error over 15 equal-width confidence bins.
  constexpr int kBins = 15;
  double ece = 0;
  auto conf = confidence.contiguous();
  auto corr = correct.contiguous();
  const double* c = conf.data_ptr<double>();
  const double* ok = corr.data_ptr<double>();
  double bin_conf[kBins] = {};
  double bin_acc[kBins] = {};
  int64_t bin_n[kBins] = {};
  for (int64_t i = 0; i < n; i++) {
    // Finite probabilities (checked above): c[i] is in [0, 1], clamped anyway.
    int b = std::clamp(static_cast<int>(std::clamp(c[i], 0.0, 1.0) * kBins), 0, kBins - 1);
    bin_conf[b] += c[i];
    bin_acc[b] += ok[i];
    bin_n[b]++;
  }
  for (int b = 0; b < kBins; b++) {
    if (bin_n[b] > 0) ece += std::abs(bin_acc[b] - bin_conf[b]) / static_cast<double>(n);
  }
  m["ece"] = ece;
  return m;
}

std::map<std::string, double> RegressionMetrics(const torch::Tensor& mean,
                                                const torch::Tensor& variance,
                                                const torch::Tensor& targets) {
  std::map<std::string, double> m;
  m["count"] = static_cast<double>(mean.size(0));
  if (mean.size(0) == 0) return m;
  torch::Tensor err = (targets - mean).to(torch::kDouble);
  torch::Tensor var = variance.to(torch::kDouble);
  m["rmse"] = err.pow(2).mean().sqrt().item<double>();
  m["nll"] = (0.5 * ((2 * M_PI * var).log() + err.pow(2) / var)).mean().item<double>();
  return m;
}

}  // namespace

Result<std::map<std::string, double>> Evaluate(const std::string& checkpoint,
                                               const store::Snapshot& snapshot,
                                               const std::string& table,
                                               const DeviceConfig& device) {
  COHORT_ASSIGN_OR_RETURN(const store::Table* t, snapshot.table(table));
  COHORT_ASSIGN_OR_RETURN(Applied a, Apply(checkpoint, snapshot, table, device, true, AllRows(*t)));
  return GuardTorch("evaluate " + checkpoint, [&]() -> Result<std::map<std::string, double>> {
    const MemberMeta& meta = a.member.meta;
    if (meta.classification()) {
      COHORT_RETURN_IF_ERROR(CheckLabelsFitMember(*t, a.labels, meta));
      return ClassificationMetrics(*t, meta, a.outputs, a.labels);
    }
    auto [mean, variance] = RegressionMoments(a.outputs, meta);
    return RegressionMetrics(mean, variance, a.labels);
  });
}

namespace {

// The MC-dropout passes of Predict: (count, n, classes) probabilities.
Result<store::HostArray> DropoutPassProbabilities(Applied& a, const store::Snapshot& snapshot,
                                                  const std::string& table_name,
                                                  const DeviceConfig& device_config,
                                                  const std::vector<uint64_t>& rows,
                                                  const DropoutPasses& passes) {
  const MemberMeta& meta = a.member.meta;
  if (!meta.classification()) {
    return Status::InvalidArgument("member " + meta.member +
                                   ": dropout passes are for classification members");
  }
  if (DropoutLayerCount(a.member.net) == 0) {
    return Status::InvalidArgument("member " + meta.member + " has no dropout layer ('" +
                                   meta.model + "'): dropout passes would all be equal");
  }
  COHORT_ASSIGN_OR_RETURN(const store::Table* table, snapshot.table(table_name));
  COHORT_ASSIGN_OR_RETURN(torch::Device device, ParseDevice(device_config.device));
  store::HostArray array(store::Dtype::kFloat32, {static_cast<uint64_t>(passes.count), rows.size(),
                                                  static_cast<uint64_t>(meta.classes)});
  COHORT_RETURN_IF_ERROR(GuardTorch("member " + meta.member, [&]() -> Status {
    COHORT_ASSIGN_OR_RETURN(auto source,
                            MakeBatchSource(snapshot.dir(), *table, meta, device, false,
                                            PassBatchRows(*table, &meta, device)));
    for (int64_t t = 0; t < passes.count; t++) {
      torch::manual_seed(passes.seed + static_cast<uint64_t>(t));
      COHORT_ASSIGN_OR_RETURN(auto run,
                              RunOver(a.member.net, *source, rows, meta, false, nullptr, true));
      torch::Tensor p = run.first.exp().to(torch::kFloat).contiguous();
      const size_t bytes = static_cast<size_t>(p.numel()) * sizeof(float);
      std::memcpy(array.data.data() + static_cast<size_t>(t) * bytes, p.data_ptr<float>(), bytes);
    }
    return Status::OK();
  }));
  return array;
}

}  // namespace

Result<PredictResult> Predict(const std::string& checkpoint, const store::Snapshot& snapshot,
                              const std::string& table, const std::string& out_path,
                              const DeviceConfig& device, const PredictOptions& options) {
  const DropoutPasses& passes = options.dropout;
  if (passes.count < 0) return Status::InvalidArgument("dropout passes must be >= 0");
  COHORT_ASSIGN_OR_RETURN(const store::Table* t, snapshot.table(table));
  const std::vector<uint64_t> rows = options.rows ? *options.rows : AllRows(*t);
  for (uint64_t row : rows) {
    if (row >= t->size()) {
      return Status::InvalidArgument("predict: row " + std::to_string(row) + " is beyond table " +
                                     table + " (" + std::to_string(t->size()) + " rows)");
    }
  }
  if (!options.precision.empty()) {
    if (std::string why = CheckPrecision(options.precision); !why.empty()) {
      return Status::InvalidArgument("predict: " + why);
    }
  }
  COHORT_ASSIGN_OR_RETURN(
      Applied a, Apply(checkpoint, snapshot, table, device, false, rows, options.precision));
  const MemberMeta& meta = a.member.meta;
  store::HostArray array;
  PredictResult result;
  COHORT_RETURN_IF_ERROR(GuardTorch("predict " + checkpoint, [&]() -> Status {
    torch::Tensor out;
    std::vector<int64_t> shape{a.outputs.size(0)};
    if (meta.classification()) {
      out = a.outputs.exp();
      shape.push_back(meta.classes);
    } else {
      auto [mean, variance] = RegressionMoments(a.outputs, meta);
      out = torch::stack({mean, variance}, 1);
      shape.push_back(2);
      shape.insert(shape.end(), meta.target_shape.begin(), meta.target_shape.end());
    }
    out = out.to(torch::kFloat).contiguous();
    array =
        store::HostArray(store::Dtype::kFloat32, std::vector<uint64_t>(shape.begin(), shape.end()));
    std::memcpy(array.data.data(), out.data_ptr<float>(), array.data.size());
    result.rows = static_cast<uint64_t>(shape[0]);
    result.shape = shape;
    return Status::OK();
  }));
  if (passes.count > 0) {
    COHORT_ASSIGN_OR_RETURN(store::HostArray sampled,
                            DropoutPassProbabilities(a, snapshot, table, device, rows, passes));
    COHORT_RETURN_IF_ERROR(store::WriteNpyFile(passes.out_path, sampled));
  }
  COHORT_RETURN_IF_ERROR(store::WriteNpyFile(out_path, array));
  result.path = out_path;
  return result;
}

Result<std::string> DescribeCheckpoint(const std::string& checkpoint) {
  COHORT_ASSIGN_OR_RETURN(LoadedCheckpoint c, LoadCheckpoint(checkpoint, torch::kCPU));
  nlohmann::json j = c.meta.ToJson();
  int64_t parameters = 0;
  for (const auto& p : c.net->parameters()) parameters += p.numel();
  j["parameters"] = parameters;
  return j.dump(2);
}

int CudaDeviceCount() {
  return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
}

std::string TorchVersion() { return TORCH_VERSION; }

}  // namespace cohort::model
