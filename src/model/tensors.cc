#include "model/tensors.h"

#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <mutex>

#include "model/device_table.h"
#include "model/dropout.h"
#include "model/onednn_forward.h"
#include "model/precision.h"
#include "model/spec.h"

namespace cohort::model {

namespace {
std::vector<int64_t> WithBatch(int64_t batch, const std::vector<int64_t>& shape) {
  std::vector<int64_t> out{batch};
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}

// A host tensor on `device`: to a GPU through pinned memory, so the copy is a DMA that does
// not hold the host thread (`t` may be a view of a buffer the caller reuses: pinning copies it).
torch::Tensor ToDevice(const torch::Tensor& t, const torch::Device& device) {
  if (device.is_cpu()) return t;
  return t.pin_memory().to(device, /*non_blocking=*/true);
}
}  // namespace

std::pair<torch::Tensor, torch::Tensor> BatchTensors(const BatchPipeline::Batch& batch,
                                                     const MemberMeta& meta,
                                                     const torch::Device& device,
                                                     bool raw_features) {
  auto* features = const_cast<std::byte*>(batch.features);  // from_blob wants void*; not written
  torch::Tensor x;
  if (meta.feature_dtype == "uint8") {
    // Bytes cross to a GPU as bytes (a quarter of the floats) and are converted there.
    x = ToDevice(torch::from_blob(features, WithBatch(batch.size, meta.input_shape), torch::kUInt8),
                 device);
    if (!raw_features) x = x.to(torch::kFloat).mul_(meta.input_scale());
  } else {
    x = ToDevice(torch::from_blob(features, WithBatch(batch.size, meta.input_shape), torch::kFloat),
                 device);
  }
  torch::Tensor y;
  if (batch.labels != nullptr) {
    auto* labels = const_cast<std::byte*>(batch.labels);
    if (meta.classification()) {
      y = torch::from_blob(labels, {batch.size}, torch::kLong);
    } else {
      y = torch::from_blob(labels, {batch.size, meta.target_size()}, torch::kFloat);
    }
    y = ToDevice(y, device);
  }
  return {x, y};
}

namespace {

// Batches gathered on the host by a BatchPipeline.
class PipelineSource : public BatchSource {
 public:
  PipelineSource(const store::Table& table, const MemberMeta& meta, const torch::Device& device,
                 bool with_labels, int64_t batch_size, const AugmentConfig* augment)
      : pipeline_(table, with_labels, batch_size), meta_(meta), device_(device) {
    if (augment != nullptr) pipeline_.SetAugmentation(*augment);
  }
  void Start(std::vector<uint64_t> rows, uint64_t pass_seed, bool raw_features) override {
    raw_features_ = raw_features;
    pipeline_.Start(std::move(rows), pass_seed);
  }
  Result<std::optional<DeviceBatch>> Next() override {
    COHORT_ASSIGN_OR_RETURN(auto batch, pipeline_.Next());
    if (!batch) return std::optional<DeviceBatch>();
    auto [x, y] = BatchTensors(*batch, meta_, device_, raw_features_);
    return std::optional<DeviceBatch>(DeviceBatch{x, y, batch->size});
  }
  torch::Device device() const override { return device_; }
  bool resident() const override { return false; }

 private:
  BatchPipeline pipeline_;
  const MemberMeta meta_;
  const torch::Device device_;
  bool raw_features_ = false;
};

// Batches gathered on the device from the table's resident copy.
class ResidentSource : public BatchSource {
 public:
  ResidentSource(ResidentView view, const store::Table& table, const MemberMeta& meta,
                 const torch::Device& device, bool with_labels, int64_t batch_size)
      : view_(std::move(view)),
        table_name_(table.name()),
        table_rows_(table.size()),
        meta_(meta),
        device_(device),
        with_labels_(with_labels && view_.labels.defined()),
        batch_size_(std::max<int64_t>(batch_size, 1)) {}

  void Start(std::vector<uint64_t> rows, uint64_t /*pass_seed*/, bool raw_features) override {
    raw_features_ = raw_features;
    status_ = Status::OK();
    next_ = 0;
    count_ = static_cast<int64_t>(rows.size());
    for (uint64_t r : rows) {
      if (r >= table_rows_) {
        // The words of the host path's gather (Table::GatherFeatures).
        status_ =
            Status::InvalidArgument("table " + table_name_ + ": row " + std::to_string(r) +
                                    " is out of range (size " + std::to_string(table_rows_) + ")");
        return;
      }
    }
    // The pass's order crosses once; each batch's places in the copy are a slice of it.
    std::vector<int64_t> order(rows.begin(), rows.end());
    places_ = view_.live.index_select(0, torch::tensor(order, torch::kLong).to(device_));
  }

  Result<std::optional<DeviceBatch>> Next() override {
    COHORT_RETURN_IF_ERROR(status_);
    if (next_ >= count_) return std::optional<DeviceBatch>();
    const int64_t n = std::min(batch_size_, count_ - next_);
    torch::Tensor places = places_.narrow(0, next_, n);
    next_ += n;
    DeviceBatch batch;
    batch.size = n;
    batch.x = view_.features.index_select(0, places);
    if (meta_.feature_dtype == "uint8" && !raw_features_) {
      batch.x = batch.x.to(torch::kFloat).mul_(meta_.input_scale());
    }
    if (with_labels_) {
      batch.y = view_.labels.index_select(0, places);
      if (!meta_.classification()) batch.y = batch.y.reshape({n, meta_.target_size()});
    }
    return std::optional<DeviceBatch>(std::move(batch));
  }
  torch::Device device() const override { return device_; }
  bool resident() const override { return true; }

 private:
  const ResidentView view_;
  const std::string table_name_;
  const uint64_t table_rows_;
  const MemberMeta meta_;
  const torch::Device device_;
  const bool with_labels_;
  const int64_t batch_size_;
  Status status_;
  torch::Tensor places_;
  bool raw_features_ = false;
  int64_t next_ = 0;
  int64_t count_ = 0;
};

}  // namespace

void TuneAllocator() {
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
  });
}

Result<std::unique_ptr<BatchSource>> MakeBatchSource(const std::string& store_dir,
                                                     const store::Table& table,
                                                     const MemberMeta& meta,
                                                     const torch::Device& device, bool with_labels,
                                                     int64_t batch_size,
                                                     const AugmentConfig* augment) {
  COHORT_ASSIGN_OR_RETURN(ResidentMode mode, ResidentModeFromEnv());
  const bool augments = augment != nullptr && augment->enabled();
  if (UseResidentTable(mode, table, device, augments)) {
    Result<ResidentView> view = ResidentTable(store_dir, table, device);
    if (view.ok()) {
      return std::unique_ptr<BatchSource>(std::make_unique<ResidentSource>(
          std::move(*view), table, meta, device, with_labels, batch_size));
    }
    // Out of device memory, most likely: the host path still works, only slower.
    std::fprintf(stderr, "cohort: keeping table %s on %s failed (%s); batches come from the host\n",
                 table.name().c_str(), device.str().c_str(), view.status().message().c_str());
  }
  return std::unique_ptr<BatchSource>(
      std::make_unique<PipelineSource>(table, meta, device, with_labels, batch_size, augment));
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

int64_t PassBatchRows(const store::Table& table, const MemberMeta* meta,
                      const torch::Device& device) {
  const bool gpu = !device.is_cpu();
  const size_t row_bytes = std::max<size_t>(table.schema().feature_row_bytes(), 1);
  int64_t rows =
      std::clamp<int64_t>(static_cast<int64_t>((64u << 20) / row_bytes), 1, gpu ? 8192 : 1024);
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
  const int64_t activation_bytes = gpu ? int64_t{512} << 20 : int64_t{12} << 20;
  int64_t by_activation = activation_bytes / (widest * static_cast<int64_t>(sizeof(float)));
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

Result<std::pair<torch::Tensor, torch::Tensor>> RunOver(Network& net, BatchSource& source,
                                                        const std::vector<uint64_t>& rows,
                                                        const MemberMeta& meta, bool with_labels,
                                                        const std::atomic<bool>* cancel,
                                                        bool sample_dropout) {
  torch::NoGradGuard no_grad;
  net->eval();
  if (sample_dropout) {
    for (const auto& module : net->modules()) {
      if (auto* dropout = module->as<Dropout>()) dropout->train();
    }
  }
  const auto total = static_cast<int64_t>(rows.size());
  PrecisionScope precision(source.device(), meta.precision);
  COHORT_ASSIGN_OR_RETURN(
      std::optional<OneDnnForward> onednn,
      OneDnnForward::For(net, source.device(), meta.precision, sample_dropout,
                         meta.feature_dtype == "uint8" ? meta.input_scale() : 0));
  source.Start(rows, /*pass_seed=*/0, /*raw_features=*/onednn && onednn->takes_raw_features());
  // Each batch's results go straight into tensors sized for the pass: a pass that kept one
  // small tensor per batch until the end interleaved them with the large activations, and the
  // heap grew by ~3 MB a batch (1.5 GB over a 60,000-row CNN pass), every page of it a fault.
  torch::Tensor all_out;
  torch::Tensor all_labels;
  int64_t done = 0;
  for (;;) {
    COHORT_ASSIGN_OR_RETURN(auto batch, source.Next());
    if (!batch) break;
    if (cancel != nullptr && cancel->load()) return Status::Aborted("cancelled");
    torch::Tensor out = (onednn ? onednn->forward(batch->x) : net->forward(batch->x));
    out = out.to(torch::kFloat);
    if (meta.classification()) out = torch::log_softmax(out, 1);
    if (!all_out.defined()) all_out = torch::empty({total, out.size(1)}, out.options());
    all_out.narrow(0, done, batch->size).copy_(out);
    if (with_labels && batch->y.defined()) {
      if (!all_labels.defined()) {
        std::vector<int64_t> shape = batch->y.sizes().vec();
        shape[0] = total;
        all_labels = torch::empty(shape, batch->y.options());
      }
      all_labels.narrow(0, done, batch->size).copy_(batch->y);
    }
    done += batch->size;
  }
  // Filled where they were computed, then one copy to the host.
  if (!all_out.defined()) return std::make_pair(torch::empty({0, meta.outputs}), torch::Tensor());
  all_out = all_out.narrow(0, 0, done).to(torch::kCPU);
  if (all_labels.defined()) all_labels = all_labels.narrow(0, 0, done).to(torch::kCPU);
  return std::make_pair(all_out, all_labels);
}

int64_t DropoutLayerCount(Network& net) {
  int64_t count = 0;
  for (const auto& module : net->modules()) {
    if (module->as<Dropout>() != nullptr) count++;
  }
  return count;
}

Result<std::pair<double, double>> ValidationLoss(Network& net, const LossFn& loss,
                                                 BatchSource& source,
                                                 const std::vector<uint64_t>& rows,
                                                 const MemberMeta& meta,
                                                 const std::atomic<bool>* cancel) {
  torch::NoGradGuard no_grad;
  net->eval();
  source.Start(rows);
  double loss_sum = 0;
  double correct = 0;
  int64_t seen = 0;
  PrecisionScope precision(source.device(), meta.precision);  // the weights do not change
  for (;;) {
    COHORT_ASSIGN_OR_RETURN(auto batch, source.Next());
    if (!batch) break;
    if (cancel != nullptr && cancel->load()) return Status::Aborted("cancelled");
    const torch::Tensor& y = batch->y;
    torch::Tensor out = net->forward(batch->x).to(torch::kFloat);
    loss_sum += loss(out, y).item<double>() * static_cast<double>(batch->size);
    if (meta.classification()) correct += out.argmax(1).eq(y).sum().item<double>();
    seen += batch->size;
  }
  net->train();
  const double n = static_cast<double>(std::max<int64_t>(seen, 1));
  return std::make_pair(loss_sum / n, correct / n);
}

Result<std::vector<double>> ResidualVariance(Network& net, BatchSource& source,
                                             const std::vector<uint64_t>& rows,
                                             const MemberMeta& meta) {
  COHORT_ASSIGN_OR_RETURN(auto run, RunOver(net, source, rows, meta, true));
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
