#include "model/tensors.h"

#include <algorithm>

#include "model/spec.h"

namespace cohort::model {

namespace {
std::vector<int64_t> WithBatch(int64_t batch, const std::vector<int64_t>& shape) {
  std::vector<int64_t> out{batch};
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}
}  // namespace

std::pair<torch::Tensor, torch::Tensor> BatchTensors(const BatchPipeline::Batch& batch,
                                                     const MemberMeta& meta,
                                                     const torch::Device& device) {
  auto* features = const_cast<std::byte*>(batch.features);  // from_blob wants void*; not written
  torch::Tensor x;
  if (meta.feature_dtype == "uint8") {
    // Bytes cross to a GPU as bytes (a quarter of the floats) and are converted there.
    x = torch::from_blob(features, WithBatch(batch.size, meta.input_shape), torch::kUInt8)
            .to(device)
            .to(torch::kFloat)
            .mul_(meta.input_scale());
  } else {
    x = torch::from_blob(features, WithBatch(batch.size, meta.input_shape), torch::kFloat);
    if (device != torch::kCPU) x = x.to(device);
  }
  torch::Tensor y;
  if (batch.labels != nullptr) {
    auto* labels = const_cast<std::byte*>(batch.labels);
    if (meta.classification()) {
      y = torch::from_blob(labels, {batch.size}, torch::kLong);
    } else {
      y = torch::from_blob(labels, {batch.size, meta.target_size()}, torch::kFloat);
    }
    if (device != torch::kCPU) y = y.to(device);
  }
  return {x, y};
}

LossFn::LossFn(const MemberMeta& meta, double label_smoothing)
    : loss_(meta.loss), targets_(meta.target_size()), label_smoothing_(label_smoothing) {}

std::pair<torch::Tensor, torch::Tensor> GaussianHead(const torch::Tensor& output, int64_t targets) {
  torch::Tensor mean = output.narrow(1, 0, targets);
  torch::Tensor variance =
      torch::nn::functional::softplus(output.narrow(1, targets, targets)) + 1e-6;
  return {mean, variance};
}

torch::Tensor LossFn::operator()(const torch::Tensor& output, const torch::Tensor& target) const {
  namespace F = torch::nn::functional;
  if (loss_ == "cross_entropy") {
    return F::cross_entropy(output, target,
                            F::CrossEntropyFuncOptions().label_smoothing(label_smoothing_));
  }
  if (loss_ == "mse") return F::mse_loss(output, target);
  // Gaussian negative log-likelihood (Lakshminarayanan et al. 2017), constant dropped.
  auto [mean, variance] = GaussianHead(output, targets_);
  return (0.5 * (variance.log() + (target - mean).pow(2) / variance)).mean();
}

int64_t PassBatchRows(const store::Table& table, const MemberMeta* meta) {
  const size_t row_bytes = std::max<size_t>(table.schema().feature_row_bytes(), 1);
  int64_t rows = std::clamp<int64_t>(static_cast<int64_t>((64u << 20) / row_bytes), 1, 1024);
  if (meta == nullptr) return rows;
  auto spec = ParseModelSpec(meta->model, meta->member);
  if (!spec.ok()) return rows;
  auto shapes = InferShapes(*spec, meta->input_shape, meta->outputs, meta->member);
  if (!shapes.ok()) return rows;
  int64_t widest = 1;
  for (const auto& shape : *shapes) {
    int64_t elements = 1;
    for (int64_t d : shape) elements *= std::max<int64_t>(d, 1);
    widest = std::max(widest, elements);
  }
  constexpr int64_t kActivationBytes = int64_t{12} << 20;
  int64_t by_activation = kActivationBytes / (widest * static_cast<int64_t>(sizeof(float)));
  return std::clamp<int64_t>(std::min(rows, by_activation), std::min<int64_t>(rows, 16), rows);
}

Result<std::pair<torch::Tensor, torch::Tensor>> FeatureMoments(const store::Table& table,
                                                               const std::vector<uint64_t>& rows,
                                                               const MemberMeta& meta) {
  torch::NoGradGuard no_grad;
  BatchPipeline pipeline(table, /*with_labels=*/false, PassBatchRows(table));
  pipeline.Start(rows);
  torch::Tensor sum = torch::zeros(meta.input_shape, torch::kDouble);
  torch::Tensor sum_sq = torch::zeros(meta.input_shape, torch::kDouble);
  for (;;) {
    COHORT_ASSIGN_OR_RETURN(auto batch, pipeline.Next());
    if (!batch) break;
    torch::Tensor x = BatchTensors(*batch, meta, torch::kCPU).first.to(torch::kDouble);
    sum += x.sum(0);
    sum_sq += (x * x).sum(0);
  }
  const double n = std::max<double>(static_cast<double>(rows.size()), 1.0);
  torch::Tensor mean = sum / n;
  torch::Tensor var = (sum_sq / n - mean * mean).clamp_min(0);
  return std::make_pair(mean.to(torch::kFloat), var.sqrt().to(torch::kFloat));
}

Result<std::pair<torch::Tensor, torch::Tensor>> RunOver(
    Network& net, BatchPipeline& pipeline, const std::vector<uint64_t>& rows,
    const MemberMeta& meta, const torch::Device& device, bool with_labels,
    const std::atomic<bool>* cancel, bool sample_dropout) {
  torch::NoGradGuard no_grad;
  net->eval();
  if (sample_dropout) {
    for (const auto& module : net->modules()) {
      if (auto* dropout = module->as<torch::nn::Dropout>()) dropout->train();
    }
  }
  pipeline.Start(rows);
  std::vector<torch::Tensor> outputs;
  std::vector<torch::Tensor> labels;
  for (;;) {
    COHORT_ASSIGN_OR_RETURN(auto batch, pipeline.Next());
    if (!batch) break;
    if (cancel != nullptr && cancel->load()) return Status::Aborted("cancelled");
    auto [x, y] = BatchTensors(*batch, meta, device);
    torch::Tensor out = net->forward(x);
    if (meta.classification()) out = torch::log_softmax(out, 1);
    outputs.push_back(out.to(torch::kCPU));
    // The pipeline reuses its buffers: keep a copy of the labels.
    if (with_labels && y.defined()) labels.push_back(y.to(torch::kCPU).clone());
  }
  torch::Tensor all_out = outputs.empty() ? torch::empty({0, meta.outputs}) : torch::cat(outputs);
  torch::Tensor all_labels = labels.empty() ? torch::Tensor() : torch::cat(labels);
  return std::make_pair(all_out, all_labels);
}

int64_t DropoutLayerCount(Network& net) {
  int64_t count = 0;
  for (const auto& module : net->modules()) {
    if (module->as<torch::nn::Dropout>() != nullptr) count++;
  }
  return count;
}

Result<std::pair<double, double>> ValidationLoss(
    Network& net, const LossFn& loss, BatchPipeline& pipeline, const std::vector<uint64_t>& rows,
    const MemberMeta& meta, const torch::Device& device, const std::atomic<bool>* cancel) {
  torch::NoGradGuard no_grad;
  net->eval();
  pipeline.Start(rows);
  double loss_sum = 0;
  double correct = 0;
  int64_t seen = 0;
  for (;;) {
    COHORT_ASSIGN_OR_RETURN(auto batch, pipeline.Next());
    if (!batch) break;
    if (cancel != nullptr && cancel->load()) return Status::Aborted("cancelled");
    auto [x, y] = BatchTensors(*batch, meta, device);
    torch::Tensor out = net->forward(x);
    loss_sum += loss(out, y).item<double>() * static_cast<double>(batch->size);
    if (meta.classification()) correct += out.argmax(1).eq(y).sum().item<double>();
    seen += batch->size;
  }
  net->train();
  const double n = static_cast<double>(std::max<int64_t>(seen, 1));
  return std::make_pair(loss_sum / n, correct / n);
}

Result<std::vector<double>> ResidualVariance(Network& net, const store::Table& table,
                                             const std::vector<uint64_t>& rows,
                                             const MemberMeta& meta, const torch::Device& device) {
  BatchPipeline pipeline(table, /*with_labels=*/true, PassBatchRows(table));
  COHORT_ASSIGN_OR_RETURN(auto run, RunOver(net, pipeline, rows, meta, device, true));
  torch::Tensor residual = run.second - run.first;
  torch::Tensor var = residual.pow(2).mean(0).to(torch::kDouble).clamp_min(1e-12);
  return std::vector<double>(var.data_ptr<double>(), var.data_ptr<double>() + var.numel());
}

std::pair<torch::Tensor, torch::Tensor> RegressionMoments(const torch::Tensor& raw,
                                                          const MemberMeta& meta) {
  if (meta.loss == "gaussian_nll") return GaussianHead(raw, meta.target_size());
  torch::Tensor var = torch::tensor(meta.residual_variance, torch::kDouble)
                          .to(torch::kFloat)
                          .reshape({1, meta.target_size()})
                          .expand_as(raw);
  return {raw, var};
}

}  // namespace cohort::model
