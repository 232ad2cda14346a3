// Training, evaluating and predicting one ensemble member: the API of the model part's
// libtorch half (library cohort_model).
//
// This header does not include libtorch, so its users compile in seconds, but its functions
// are implemented by the only code that does (trainer.cc, evaluate.cc, ...): include it only
// from code that links cohort_model (the worker, `cohort-member`). Code that only describes a
// member's training (the loop, the `cohort` CLI) includes model/train_config.h instead.
//
// Data always comes from a store snapshot through Table::GatherFeatures into buffers the
// trainer owns; nothing copies a whole table.
//
// Thread-safety: each call is independent; a call runs on the calling thread plus one
// batch-preparing thread of its own. `cancel` may be set from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/train_config.h"
#include "store/snapshot.h"

namespace cohort::model {

struct Progress {
  int64_t epoch = 0;  // 1-based
  int64_t epochs = 0;
  int64_t step = 0;  // within the epoch, 1-based
  int64_t steps_per_epoch = 0;
  double loss = 0;                // running mean over the epoch so far
  double samples_per_second = 0;  // over the epoch so far
  double learning_rate = 0;
};

struct EpochMetrics {
  int64_t epoch = 0;
  double train_loss = 0;
  std::optional<double> val_loss;
  std::optional<double> val_accuracy;  // classification only
  double learning_rate = 0;
  double seconds = 0;
};

// Where a training step's time went, summed over the run, in seconds.
struct StepTimes {
  double data = 0;  // waiting for the next batch and moving it to the device
  double forward = 0;
  double backward = 0;
  double optimizer = 0;
};

struct TrainResult {
  std::vector<EpochMetrics> epochs;
  int64_t best_epoch = 0;  // the epoch whose weights were kept (last one without validation)
  bool stopped_early = false;
  uint64_t samples = 0;  // samples trained on, over all epochs
  double seconds = 0;    // wall time of the training loop
  StepTimes step_times;
  int64_t parameters = 0;
  // The batches were gathered on the device from a resident copy of the table
  // (device_table.h), not on the host.
  bool resident_data = false;
  // Dense layers of at least kOneDnnLinearMinMultiplyAdds trained through oneDNN
  // (model/onednn_linear.h), not the BLAS sgemm.
  bool onednn_dense = false;
  std::string checkpoint;
};

using ProgressFn = std::function<void(const Progress&)>;

// Trains a member on `table` of `snapshot` and writes its checkpoint to `checkpoint_path`
// (temp file + rename). `progress` is called at most every `progress_interval_s`.
Result<TrainResult> Train(const store::Snapshot& snapshot, const std::string& table,
                          const TrainConfig& config, const std::string& checkpoint_path,
                          const ProgressFn& progress = nullptr, double progress_interval_s = 0.5,
                          const std::atomic<bool>* cancel = nullptr);

// Classification: accuracy, nll, brier, ece (15 bins). Regression: rmse, nll (Gaussian; for
// an MSE member the variance is the training residual variance). Plus "count".
Result<std::map<std::string, double>> Evaluate(const std::string& checkpoint,
                                               const store::Snapshot& snapshot,
                                               const std::string& table,
                                               const DeviceConfig& device = {});

struct PredictResult {
  uint64_t rows = 0;
  std::vector<int64_t> shape;  // of the array written
  std::string path;
};

// MC dropout (Gal & Ghahramani 2016): `count` further passes over the table with the member's
// dropout layers drawing masks as in training (every other layer as in evaluation), so one
// member gives `count` samples of its predictive distribution. Pass t seeds libtorch's
// generator with seed + t, so the passes are the same on every run of the same command.
struct DropoutPasses {
  int64_t count = 0;  // 0: none
  uint64_t seed = 0;
  std::string out_path;  // float32 (count, n, classes) probabilities
};

struct PredictOptions {
  // Only these rows of the table, in this order (acquisition.pool_sample); unset: every row.
  std::optional<std::vector<uint64_t>> rows;
  DropoutPasses dropout;
  // "fp32" or "bf16" (TrainConfig::precision); empty: the precision the member trained in.
  std::string precision;
};

// Writes per-sample outputs for every row of `table` (or options.rows), in table order, as a
// float32 .npy: classification (n, classes) probabilities; regression (n, 2, *target_shape)
// with the mean in [:, 0] and the variance in [:, 1]. With `dropout.count > 0` it also writes
// the MC-dropout passes (classification members with at least one dropout layer; refused
// otherwise). A row beyond the table is refused.
Result<PredictResult> Predict(const std::string& checkpoint, const store::Snapshot& snapshot,
                              const std::string& table, const std::string& out_path,
                              const DeviceConfig& device = {}, const PredictOptions& options = {});

// Writes a checkpoint's network as plain files into `dir` (created if missing): every weight
// and buffer as a float32 .npy, and returns the JSON that says how to apply them: the
// checkpoint's meta (spec, task, classes, input dtype and shape) plus "input" (scale,
// standardisation files, whether a channel axis is added) and "layers", one object per step
// in order ({"op": "dense", "weight": "layer-01.weight.npy", "bias": ...}, conv2d with stride
// and padding, maxpool/avgpool with kernel, flatten, dropout (identity), batchnorm and
// layernorm with eps, and the activations relu, gelu (erf form), tanh, sigmoid, elu, silu).
// python/cohort_ensemble.py reads it (docs/cli.md, `cohort export`).
Result<nlohmann::json> ExportMember(const std::string& checkpoint, const std::string& dir);

// What a checkpoint says about itself (member, spec, task, schema, training summary) as JSON.
Result<std::string> DescribeCheckpoint(const std::string& checkpoint);

// Whether this build of libtorch can use CUDA, and the device count.
int CudaDeviceCount();
std::string TorchVersion();

}  // namespace cohort::model
