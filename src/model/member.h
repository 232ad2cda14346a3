// Training, evaluating and predicting one ensemble member: the model part's public API.
//
// This header does not include libtorch, so the worker, the loop and the CLI compile in
// seconds; the implementation (trainer.cc, network.cc, ...) is the only code that does.
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
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/snapshot.h"

namespace cohort::model {

struct OptimizerConfig {
  std::string name = "adam";  // adam | adamw | sgd
  double learning_rate = 1e-3;
  double weight_decay = 0.0;  // L2 for adam and sgd, decoupled for adamw
  double momentum = 0.9;      // sgd
  double beta1 = 0.9;         // adam, adamw
  double beta2 = 0.999;
};

struct ScheduleConfig {
  std::string name = "constant";  // constant | step | cosine
  int64_t warmup_epochs = 0;      // linear warm-up from 0 over these epochs (stepwise)
  int64_t step_epochs = 10;       // step: multiply by gamma every step_epochs
  double gamma = 0.1;
  double min_learning_rate = 0.0;  // cosine: the floor at the last epoch
};

struct DeviceConfig {
  std::string device = "cpu";  // cpu | cuda | cuda:N
  int threads = 1;             // intra-op threads on CPU
};

struct TrainConfig {
  std::string member = "member";  // names the member in errors and events
  std::string model;              // spec text (spec.h)
  // Classification: cross_entropy. Regression: mse or gaussian_nll. "auto" picks
  // cross_entropy for class labels and mse for vector labels.
  std::string loss = "auto";
  double label_smoothing = 0.0;
  // Classification: the class count; 0 takes one more than the largest label in the table
  // (give it when a class may be missing from a small training table).
  int64_t classes = 0;
  bool standardize = false;  // per-feature mean/std from the training table
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  double grad_clip_norm = 0.0;  // 0: off
  int64_t batch_size = 64;
  int64_t epochs = 10;
  uint64_t seed = 0;
  double validation_fraction = 0.0;  // held out of the table (seeded), for early stopping
  int64_t patience = 0;              // stop after this many epochs without a better val loss
  // Continue from this checkpoint's weights and optimizer state instead of fresh
  // initialisation (the member's previous round). Empty: fresh.
  std::string warm_start_from;
  DeviceConfig device;
};

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

// Writes per-sample outputs for every row of `table`, in table order, as a float32 .npy:
// classification (n, classes) probabilities; regression (n, 2, *target_shape) with the mean in
// [:, 0] and the variance in [:, 1].
Result<PredictResult> Predict(const std::string& checkpoint, const store::Snapshot& snapshot,
                              const std::string& table, const std::string& out_path,
                              const DeviceConfig& device = {});

// What a checkpoint says about itself (member, spec, task, schema, training summary) as JSON.
Result<std::string> DescribeCheckpoint(const std::string& checkpoint);

// Whether this build of libtorch can use CUDA, and the device count.
int CudaDeviceCount();
std::string TorchVersion();

}  // namespace cohort::model
