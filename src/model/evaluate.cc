// Evaluate(), Predict() and DescribeCheckpoint(): a trained member applied to a table.
#include <cmath>

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
                      bool with_labels) {
  COHORT_ASSIGN_OR_RETURN(const store::Table* table, snapshot.table(table_name));
  COHORT_ASSIGN_OR_RETURN(torch::Device device, ParseDevice(device_config.device));
  at::set_num_threads(std::max(device_config.threads, 1));
  Applied out;
  COHORT_ASSIGN_OR_RETURN(out.member, LoadCheckpoint(checkpoint, device));
  COHORT_RETURN_IF_ERROR(CheckCompatible(out.member.meta, *table, with_labels));
  return GuardTorch("member " + out.member.meta.member, [&]() -> Result<Applied> {
    BatchPipeline pipeline(*table, with_labels, PassBatchRows(*table, &out.member.meta));
    COHORT_ASSIGN_OR_RETURN(auto run, RunOver(out.member.net, pipeline, AllRows(*table),
                                              out.member.meta, device, with_labels));
    out.outputs = run.first;
    out.labels = run.second;
    return std::move(out);
  });
}

std::map<std::string, double> ClassificationMetrics(const torch::Tensor& log_probs,
                                                    const torch::Tensor& labels) {
  const int64_t n = log_probs.size(0);
  std::map<std::string, double> m;
  m["count"] = static_cast<double>(n);
  if (n == 0) return m;
  torch::Tensor logp = log_probs.to(torch::kDouble);
  torch::Tensor p = logp.exp();
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
    int b = std::min(kBins - 1, static_cast<int>(c[i] * kBins));
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
  COHORT_ASSIGN_OR_RETURN(Applied a, Apply(checkpoint, snapshot, table, device, true));
  return GuardTorch("evaluate " + checkpoint, [&]() -> Result<std::map<std::string, double>> {
    const MemberMeta& meta = a.member.meta;
    if (meta.classification()) {
      if (a.labels.numel() > 0 && a.labels.max().item<int64_t>() >= meta.classes) {
        return Status::InvalidArgument("table " + table + " has class label " +
                                       std::to_string(a.labels.max().item<int64_t>()) +
                                       ", but member " + meta.member + " knows " +
                                       std::to_string(meta.classes) + " classes");
      }
      return ClassificationMetrics(a.outputs, a.labels);
    }
    auto [mean, variance] = RegressionMoments(a.outputs, meta);
    return RegressionMetrics(mean, variance, a.labels);
  });
}

Result<PredictResult> Predict(const std::string& checkpoint, const store::Snapshot& snapshot,
                              const std::string& table, const std::string& out_path,
                              const DeviceConfig& device) {
  COHORT_ASSIGN_OR_RETURN(Applied a, Apply(checkpoint, snapshot, table, device, false));
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
