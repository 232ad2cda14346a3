// The libtorch side of a member's data (internal to src/model): batches as tensors, the
// loss of each task, and the passes over a table that evaluation, validation and
// prediction share.
//
// Thread-safety: free functions over the caller's network; one thread at a time.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "model/batch_pipeline.h"
#include "model/network.h"
#include "model/task.h"
#include "model/train_config.h"

namespace cohort::model {

// A gathered batch as (x, y) on `device`: x float (B, *input_shape), uint8 features
// converted and scaled to [0, 1] (one conversion and one in-place multiply), float32 ones
// used in place; y int64 (B) for classes, float (B, target_size) for regression, undefined
// when the batch has no labels.
// With `raw_features`, uint8 features stay uint8 and unscaled (for a pass whose first layer
// takes the scale, onednn_forward.h).
std::pair<torch::Tensor, torch::Tensor> BatchTensors(const BatchPipeline::Batch& batch,
                                                     const MemberMeta& meta,
                                                     const torch::Device& device,
                                                     bool raw_features = false);

// One batch of a pass, on the pass's device: x float (B, *input_shape) scaled as
// BatchTensors makes it, y as BatchTensors makes it (undefined without labels).
struct DeviceBatch {
  torch::Tensor x;
  torch::Tensor y;
  int64_t size = 0;
};

// Where the batches of a pass come from: gathered on the host by a BatchPipeline and copied to
// the device (through pinned memory on a GPU), or gathered on the device from a resident copy
// of the table (device_table.h). Both give the same rows in the same order and, on one device,
// the same values.
//
// Thread-safety: one thread at a time, like BatchPipeline.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Begins a pass over `rows` (table row numbers); `pass_seed` draws its augmentations. With
  // `raw_features` the batches' x keeps uint8 features as the table holds them (uint8, not
  // scaled); float features are given as always.
  virtual void Start(std::vector<uint64_t> rows, uint64_t pass_seed = 0,
                     bool raw_features = false) = 0;
  // The device the batches are on.
  virtual torch::Device device() const = 0;
  // The next batch; nullopt once the pass is over; InvalidArgument for a row out of range.
  virtual Result<std::optional<DeviceBatch>> Next() = 0;
  // Whether the batches come from a resident copy (for logs and tests).
  virtual bool resident() const = 0;
};

// The source for passes over `table` (of the store at `store_dir`) on `device`: resident when
// COHORT_RESIDENT_DATA allows it (device_table.h) and `augment` does not augment, and the copy
// could be made; the host pipeline otherwise. An error only for a bad COHORT_RESIDENT_DATA.
Result<std::unique_ptr<BatchSource>> MakeBatchSource(const std::string& store_dir,
                                                     const store::Table& table,
                                                     const MemberMeta& meta,
                                                     const torch::Device& device, bool with_labels,
                                                     int64_t batch_size,
                                                     const AugmentConfig* augment = nullptr);

// glibc returns large tensors to the OS after every batch and faults them back in on the
// next; raising its thresholds keeps them (docs/development.md: ~+25% training samples/s, and
// a pool pass of a convolutional member spent most of its time in page faults without it).
// Once per process, before the first pass.
void TuneAllocator();

// The training loss of a member's task, averaged over the batch.
class LossFn {
 public:
  LossFn(const MemberMeta& meta, double label_smoothing);
  torch::Tensor operator()(const torch::Tensor& output, const torch::Tensor& target) const;

 private:
  std::string loss_;
  int64_t targets_;
  double label_smoothing_;
};

// The Gaussian head's mean and variance from raw outputs (B, 2 * targets).
std::pair<torch::Tensor, torch::Tensor> GaussianHead(const torch::Tensor& output, int64_t targets);

// Rows per batch for passes that are not training (evaluation, prediction, statistics):
// up to 1024, fewer for large samples so a batch buffer stays within 64 MiB, and, given the
// member, fewer for wide layers so the largest activation of a batch stays near 12 MiB:
// a pass over a 28x28 image table with a 32-filter convolution runs 2.3x faster at 128 rows
// than at 1024 on one core (docs/benchmarks.md, "The loop"), because the activations then
// stay in cache.
// On a GPU the batches are larger (up to 8192 rows, activations near 512 MiB): a GPU needs
// wide batches to be busy, and has the memory.
int64_t PassBatchRows(const store::Table& table, const MemberMeta* meta = nullptr,
                      const torch::Device& device = torch::kCPU);

// Per-feature mean and standard deviation (shape input_shape) of `rows`, after scaling.
Result<std::pair<torch::Tensor, torch::Tensor>> FeatureMoments(const store::Table& table,
                                                               const std::vector<uint64_t>& rows,
                                                               const MemberMeta& meta);

// Runs the network in evaluation mode over `rows` of `source`'s table and returns the
// concatenated outputs on the CPU (gathered on the device and copied once): log-probabilities (n,
// classes) for classification (exact NLL even for confident mistakes), raw outputs (n, outputs)
// otherwise; plus the labels (n,) / (n, targets) when `with_labels`. Aborted when `cancel` is set.
// With `sample_dropout` the dropout layers stay in training mode (MC dropout), drawing from
// libtorch's generator.
Result<std::pair<torch::Tensor, torch::Tensor>> RunOver(Network& net, BatchSource& source,
                                                        const std::vector<uint64_t>& rows,
                                                        const MemberMeta& meta, bool with_labels,
                                                        const std::atomic<bool>* cancel = nullptr,
                                                        bool sample_dropout = false);

// The number of dropout layers in `net`.
int64_t DropoutLayerCount(Network& net);

// Mean loss and (classification) accuracy of `net` on `rows`.
Result<std::pair<double, double>> ValidationLoss(Network& net, const LossFn& loss,
                                                 BatchSource& source,
                                                 const std::vector<uint64_t>& rows,
                                                 const MemberMeta& meta,
                                                 const std::atomic<bool>* cancel);

// Per-target variance of the residuals y - f(x) over `rows` (the MSE member's noise level).
Result<std::vector<double>> ResidualVariance(Network& net, BatchSource& source,
                                             const std::vector<uint64_t>& rows,
                                             const MemberMeta& meta);

// Regression mean and variance (n, targets) each, from raw outputs and the member's meta.
std::pair<torch::Tensor, torch::Tensor> RegressionMoments(const torch::Tensor& raw,
                                                          const MemberMeta& meta);

}  // namespace cohort::model
