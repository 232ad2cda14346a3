// Train(): one member's training loop, in the style of pytorch/examples (cpp): plain
// libtorch, a Sequential network, an optimizer, a loop over batches.

#include <chrono>
#include <cmath>
#include <mutex>
#include <random>
#include <sstream>

#include "model/augment.h"
#include "model/batch_pipeline.h"
#include "model/checkpoint.h"
#include "model/member.h"
#include "model/network.h"
#include "model/onednn_forward.h"
#include "model/onednn_linear.h"
#include "model/precision.h"
#include "model/task.h"
#include "model/tensors.h"

namespace cohort::model {

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void SetThreads(int threads) {
  at::set_num_threads(std::max(threads, 1));
  static std::once_flag once;
  std::call_once(once, [] {
    try {
      at::set_num_interop_threads(1);
    } catch (const c10::Error&) {
      // Already set by an earlier parallel call in this process; harmless.
    }
  });
}

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const OptimizerConfig& c,
                                                       const std::vector<torch::Tensor>& params) {
  if (c.name == "adam") {
    return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(c.learning_rate)
                                                            .betas({c.beta1, c.beta2})
                                                            .weight_decay(c.weight_decay));
  }
  if (c.name == "adamw") {
    return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(c.learning_rate)
                                                             .betas({c.beta1, c.beta2})
                                                             .weight_decay(c.weight_decay));
  }
  return std::make_unique<torch::optim::SGD>(
      params,
      torch::optim::SGDOptions(c.learning_rate).momentum(c.momentum).weight_decay(c.weight_decay));
}

// Learning rate at a fractional epoch (0-based: 0.5 is half-way through the first epoch).
double LearningRate(const TrainConfig& c, double epoch_pos) {
  const double base = c.optimizer.learning_rate;
  const auto& s = c.schedule;
  if (s.warmup_epochs > 0 && epoch_pos < static_cast<double>(s.warmup_epochs)) {
    return base * epoch_pos / static_cast<double>(s.warmup_epochs);
  }
  if (s.name == "step") {
    return base * std::pow(s.gamma, std::floor(epoch_pos / static_cast<double>(s.step_epochs)));
  }
  if (s.name == "cosine") {
    double span = static_cast<double>(c.epochs - s.warmup_epochs);
    double t = span > 0 ? (epoch_pos - static_cast<double>(s.warmup_epochs)) / span : 1.0;
    t = std::clamp(t, 0.0, 1.0);
    return s.min_learning_rate + (base - s.min_learning_rate) * 0.5 * (1.0 + std::cos(M_PI * t));
  }
  return base;
}

// Range checks come from the table of fields (train_config.h), the same rules the loop
// config applies before a run starts.
Status ValidateConfig(const TrainConfig& c) {
  if (auto problem = CheckTrainConfig(c)) {
    return Status::InvalidArgument("member " + c.member + ": " + problem->path + ": " +
                                   problem->message);
  }
  return Status::OK();
}

// What a run trains on and what it builds, worked out before any tensor exists.
struct Plan {
  const store::Table* table = nullptr;
  MemberMeta meta;
  ModelSpec spec;
  torch::Device device{torch::kCPU};
};

Result<Plan> MakePlan(const store::Snapshot& snapshot, const std::string& table_name,
                      const TrainConfig& config) {
  COHORT_RETURN_IF_ERROR(ValidateConfig(config));
  Plan plan;
  COHORT_ASSIGN_OR_RETURN(plan.table, snapshot.table(table_name));
  COHORT_ASSIGN_OR_RETURN(plan.meta, DescribeTask(*plan.table, config));
  COHORT_ASSIGN_OR_RETURN(plan.spec, ParseModelSpec(config.model, config.member));
  COHORT_RETURN_IF_ERROR(
      InferShapes(plan.spec, plan.meta.input_shape, plan.meta.outputs, config.member).status());
  COHORT_ASSIGN_OR_RETURN(plan.device, ParseDevice(config.device.device));
  if (plan.table->size() == 0) {
    return Status::InvalidArgument("member " + config.member + ": table " + table_name +
                                   " is empty");
  }
  if (std::string why = CheckAugmentShape(config.augment, plan.table->schema().feature_shape);
      !why.empty()) {
    return Status::InvalidArgument("member " + config.member + ": " + why);
  }
  return plan;
}

struct Rows {
  std::vector<uint64_t> train;
  std::vector<uint64_t> validation;
};

// Validation rows are a seeded sample of the table, held out of training.
Result<Rows> HoldOutValidationRows(const store::Table& table, const TrainConfig& config,
                                   std::mt19937_64& rng) {
  Rows rows;
  SplitRows(table.size(), config.validation_fraction, rng, &rows.train, &rows.validation);
  if (rows.train.empty()) {
    return Status::InvalidArgument("member " + config.member +
                                   ": no training rows left after "
                                   "holding out the validation fraction");
  }
  return rows;
}

// Copies the weights (and, unless this round recomputes them, the standardisation
// statistics) of the checkpoint a warm start continues from.
Status CopyWarmStartWeights(const TrainConfig& config, const MemberMeta& meta, Network& net) {
  COHORT_ASSIGN_OR_RETURN(LoadedCheckpoint previous,
                          LoadCheckpoint(config.warm_start_from, torch::kCPU));
  if (previous.meta.model != meta.model || previous.meta.input_shape != meta.input_shape ||
      previous.meta.feature_dtype != meta.feature_dtype || previous.meta.outputs != meta.outputs ||
      previous.meta.loss != meta.loss || previous.meta.standardize != meta.standardize) {
    return Status::InvalidArgument("member " + config.member + ": cannot warm start from " +
                                   config.warm_start_from + ": it holds model '" +
                                   previous.meta.model +
                                   "' (its spec, features, loss or standardisation differ)");
  }
  torch::NoGradGuard no_grad;
  auto src = previous.net->named_parameters();
  for (auto& p : net->named_parameters()) p.value().copy_(src[p.key()]);
  auto src_buffers = previous.net->named_buffers();
  for (auto& b : net->named_buffers()) {
    // Standardisation statistics come from this round's data when asked for.
    if (config.standardize && b.key().rfind("input_", 0) == 0) continue;
    b.value().copy_(src_buffers[b.key()]);
  }
  return Status::OK();
}

// The network with its initial weights (seeded, or the warm start's), on the CPU.
Result<Network> BuildNetwork(const Plan& plan, const Rows& rows, const TrainConfig& config) {
  Network net(plan.spec, plan.meta.input_shape, plan.meta.outputs, plan.meta.standardize);
  if (config.standardize) {
    COHORT_ASSIGN_OR_RETURN(auto moments, FeatureMoments(*plan.table, rows.train, plan.meta));
    if (config.augment.enabled()) {
      // Per-pixel statistics would blow up the pixels augmentation moves content into: a
      // border pixel that is almost always 0 has a tiny std. One mean and std over every pixel.
      torch::NoGradGuard no_grad;
      const torch::Tensor mean = moments.first.mean();
      const torch::Tensor var =
          (moments.second.square() + moments.first.square()).mean() - mean.square();
      moments.first = torch::full_like(moments.first, mean.item<float>());
      moments.second = torch::full_like(moments.second, var.clamp_min(0).sqrt().item<float>());
    }
    net->SetStandardization(moments.first, moments.second);
  }
  if (!config.warm_start_from.empty()) {
    COHORT_RETURN_IF_ERROR(CopyWarmStartWeights(config, plan.meta, net));
  }
  return net;
}

// Training steps per epoch. Batch normalisation cannot train on a batch of one sample: such
// a last batch is left out.
int64_t StepsPerEpoch(const ModelSpec& spec, uint64_t train_rows, uint64_t batch_size) {
  bool has_batchnorm = false;
  for (const auto& l : spec.layers) has_batchnorm |= l.kind == LayerKind::kBatchNorm;
  int64_t steps = static_cast<int64_t>((train_rows + batch_size - 1) / batch_size);
  if (has_batchnorm && steps > 1 && train_rows % batch_size == 1) steps--;
  return steps;
}

// One training run from its first epoch to its best weights: the network and its
// optimizer, the batch sources, the best epoch so far, and the result being filled in.
class TrainingRun {
 public:
  TrainingRun(const TrainConfig& config, const Plan& plan, const Rows& rows, Network net,
              const ProgressFn& progress, double progress_interval_s,
              const std::atomic<bool>* cancel)
      : config_(config),
        plan_(plan),
        rows_(rows),
        net_(std::move(net)),
        progress_(progress),
        progress_interval_s_(progress_interval_s),
        cancel_(cancel),
        loss_fn_(plan.meta, config.label_smoothing),
        steps_(StepsPerEpoch(plan.spec, rows.train.size(), config.batch_size)),
        // On a GPU, reading the loss every step would wait for the device: the loss is summed
        // on the device and read (and checked for NaN) when progress is reported and per
        // epoch.
        read_loss_each_step_(plan.device.is_cpu()) {}

  // Moves the network to the device, makes its optimizer (with the warm start's state) and
  // the batch sources.
  Status Start(const std::string& store_dir) {
    COHORT_ASSIGN_OR_RETURN(
        source_, MakeBatchSource(store_dir, *plan_.table, plan_.meta, plan_.device,
                                 /*with_labels=*/true, config_.batch_size, &config_.augment));
    const int64_t pass_rows = PassBatchRows(*plan_.table, &plan_.meta, plan_.device);
    if (!rows_.validation.empty() || plan_.meta.loss == "mse") {
      COHORT_ASSIGN_OR_RETURN(pass_source_,
                              MakeBatchSource(store_dir, *plan_.table, plan_.meta, plan_.device,
                                              /*with_labels=*/true, pass_rows));
    }
    result_.resident_data = source_->resident();
    net_->to(plan_.device);
    // fp32 dense layers through oneDNN on a CPU where that pays (model/onednn_linear.h), or on
    // any with COHORT_ONEDNN=on; COHORT_ONEDNN=off keeps libtorch's own (BLAS) path, and any
    // other value than auto/on/off is refused.
    COHORT_ASSIGN_OR_RETURN(const bool onednn, OneDnnUsableOn(plan_.device));
    COHORT_ASSIGN_OR_RETURN(const OneDnnMode mode, OneDnnModeFromEnv());
    result_.onednn_dense = onednn && plan_.meta.precision == "fp32" &&
                           (mode == OneDnnMode::kOn || OneDnnLinearPaysOnThisCpu());
    net_->set_onednn_dense(result_.onednn_dense);
    optimizer_ = MakeOptimizer(config_.optimizer, net_->parameters());
    if (!config_.warm_start_from.empty()) {
      COHORT_RETURN_IF_ERROR(
          LoadOptimizerState(config_.warm_start_from, plan_.device, *optimizer_));
    }
    for (const auto& p : net_->parameters()) result_.parameters += p.numel();
    return Status::OK();
  }

  // Every epoch, until the last or until the validation loss stops improving.
  Status RunEpochs(std::mt19937_64& rng) {
    const auto run_start = Clock::now();
    for (int64_t epoch = 1; epoch <= config_.epochs; epoch++) {
      const auto epoch_start = Clock::now();
      COHORT_ASSIGN_OR_RETURN(EpochMetrics m, TrainEpoch(epoch, rng));
      COHORT_RETURN_IF_ERROR(Validate(epoch, &m));
      m.seconds = Seconds(epoch_start, Clock::now());
      result_.epochs.push_back(m);
      if (config_.patience > 0 && since_best_ >= config_.patience) {
        result_.stopped_early = epoch < config_.epochs;
        break;
      }
    }
    result_.seconds = Seconds(run_start, Clock::now());
    return Status::OK();
  }

  // Puts back the best epoch's weights and optimizer state when a later epoch was worse.
  void RestoreBestEpoch() {
    if (best_state_.empty() || result_.best_epoch == result_.epochs.back().epoch) return;
    torch::NoGradGuard no_grad;
    size_t i = 0;
    for (auto& p : net_->parameters()) p.copy_(best_state_[i++]);
    for (auto& b : net_->buffers()) b.copy_(best_state_[i++]);
    std::istringstream in(best_optimizer_);
    torch::serialize::InputArchive archive;
    archive.load_from(in, plan_.device);
    optimizer_->load(archive);
  }

  // The checkpoint's meta (with the training summary) and the checkpoint itself.
  Result<TrainResult> WriteCheckpoint(const store::Snapshot& snapshot,
                                      const std::string& table_name,
                                      const std::string& checkpoint_path) {
    MemberMeta meta = plan_.meta;
    if (meta.loss == "mse") {
      COHORT_ASSIGN_OR_RETURN(meta.residual_variance,
                              ResidualVariance(net_, *pass_source_, rows_.train, meta));
    }
    meta.training = {{"store", snapshot.dir()},
                     {"generation", snapshot.generation()},
                     {"table", table_name},
                     {"rows", rows_.train.size()},
                     {"validation_rows", rows_.validation.size()},
                     {"epochs", result_.epochs.size()},
                     {"best_epoch", result_.best_epoch},
                     {"seed", config_.seed},
                     {"best_epoch_train_loss", result_.epochs[result_.best_epoch - 1].train_loss}};
    if (Cancelled()) return Status::Aborted("member " + config_.member + ": cancelled");
    net_->to(torch::kCPU);
    COHORT_RETURN_IF_ERROR(SaveCheckpoint(checkpoint_path, meta, net_, optimizer_.get()));
    result_.checkpoint = checkpoint_path;
    return result_;
  }

 private:
  // The running loss of an epoch: on the CPU summed step by step, on a GPU on the device.
  struct EpochLoss {
    double sum = 0;
    torch::Tensor device_sum;
    int64_t seen = 0;  // samples
  };

  // One pass over the training rows, in an order drawn from `rng`.
  Result<EpochMetrics> TrainEpoch(int64_t epoch, std::mt19937_64& rng) {
    const auto epoch_start = Clock::now();
    auto last_report = epoch_start;
    net_->train();
    source_->Start(Shuffled(rows_.train, rng), AugmentPassSeed(config_.seed, epoch));
    EpochLoss loss;
    loss.device_sum = torch::zeros({}, torch::TensorOptions().device(plan_.device));
    double lr = 0;
    for (int64_t step = 1;; step++) {
      auto t0 = Clock::now();
      COHORT_ASSIGN_OR_RETURN(auto batch, source_->Next());
      if (!batch) break;
      if (Cancelled()) return Status::Aborted("member " + config_.member + ": cancelled");
      if (step > steps_) continue;  // the single-sample batch batchnorm cannot use
      // Warm-up reaches the base rate at the end of its last step.
      lr = LearningRate(config_, static_cast<double>(epoch - 1) +
                                     static_cast<double>(step) / static_cast<double>(steps_));
      COHORT_RETURN_IF_ERROR(Step(*batch, lr, epoch, step, t0, &loss));
      auto now = Clock::now();
      const bool report = Seconds(last_report, now) >= progress_interval_s_ || step == steps_;
      if (report && !read_loss_each_step_) {
        loss.sum = loss.device_sum.item<double>();
        COHORT_RETURN_IF_ERROR(CheckFinite(loss.sum, epoch, step));
      }
      if (progress_ && report) {
        last_report = now;
        double elapsed = Seconds(epoch_start, now);
        progress_({epoch, config_.epochs, step, steps_, loss.sum / static_cast<double>(loss.seen),
                   elapsed > 0 ? static_cast<double>(loss.seen) / elapsed : 0.0, lr});
      }
    }
    if (!read_loss_each_step_) {
      loss.sum = loss.device_sum.item<double>();
      COHORT_RETURN_IF_ERROR(CheckFinite(loss.sum, epoch, steps_));
    }
    result_.samples += static_cast<uint64_t>(loss.seen);
    EpochMetrics m;
    m.epoch = epoch;
    m.train_loss = loss.sum / static_cast<double>(std::max<int64_t>(loss.seen, 1));
    m.learning_rate = lr;
    return m;
  }

  // One optimizer step on `batch` at learning rate `lr`; `t0` is when fetching it began.
  Status Step(const DeviceBatch& batch, double lr, int64_t epoch, int64_t step,
              Clock::time_point t0, EpochLoss* loss_so_far) {
    const torch::Tensor& x = batch.x;
    const torch::Tensor& y = batch.y;
    for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
    auto t1 = Clock::now();
    torch::Tensor loss;
    {
      // The forward pass in the member's precision; the loss and the backward pass in float32.
      PrecisionScope scope(plan_.device, plan_.meta.precision);
      loss = loss_fn_(net_->forward(x).to(torch::kFloat), y);
    }
    auto t2 = Clock::now();
    optimizer_->zero_grad();
    loss.backward();
    auto t3 = Clock::now();
    if (config_.grad_clip_norm > 0) {
      torch::nn::utils::clip_grad_norm_(net_->parameters(), config_.grad_clip_norm);
    }
    optimizer_->step();
    if (read_loss_each_step_) {
      const double value = loss.item<double>();
      COHORT_RETURN_IF_ERROR(CheckFinite(value, epoch, step));
      loss_so_far->sum += value * static_cast<double>(batch.size);
    } else {
      loss_so_far->device_sum += loss.detach() * static_cast<double>(batch.size);
    }
    auto t4 = Clock::now();
    result_.step_times.data += Seconds(t0, t1);
    result_.step_times.forward += Seconds(t1, t2);
    result_.step_times.backward += Seconds(t2, t3);
    result_.step_times.optimizer += Seconds(t3, t4);
    loss_so_far->seen += batch.size;
    return Status::OK();
  }

  // The validation loss (and accuracy) after `epoch`; keeps the best epoch's state. Without
  // validation rows every epoch is the best so far.
  Status Validate(int64_t epoch, EpochMetrics* m) {
    if (rows_.validation.empty()) {
      result_.best_epoch = epoch;
      return Status::OK();
    }
    COHORT_ASSIGN_OR_RETURN(auto val, ValidationLoss(net_, loss_fn_, *pass_source_,
                                                     rows_.validation, plan_.meta, cancel_));
    m->val_loss = val.first;
    if (plan_.meta.classification()) m->val_accuracy = val.second;
    if (val.first < best_val_) {
      best_val_ = val.first;
      since_best_ = 0;
      result_.best_epoch = epoch;
      KeepBest();
    } else {
      since_best_++;
    }
    return Status::OK();
  }

  // The weights and optimizer state are kept together so a warm start from this checkpoint
  // continues from a consistent point.
  void KeepBest() {
    best_state_.clear();
    for (const auto& p : net_->parameters()) best_state_.push_back(p.detach().clone());
    for (const auto& b : net_->buffers()) best_state_.push_back(b.detach().clone());
    torch::serialize::OutputArchive archive;
    optimizer_->save(archive);
    std::ostringstream out;
    archive.save_to(out);
    best_optimizer_ = out.str();
  }

  bool Cancelled() const { return cancel_ != nullptr && cancel_->load(); }

  Status CheckFinite(double value, int64_t epoch, int64_t step) const {
    if (std::isfinite(value)) return Status::OK();
    return Status::InvalidArgument(
        "member " + config_.member + ": loss became " + std::to_string(value) + " at epoch " +
        std::to_string(epoch) + (read_loss_each_step_ ? " step " : " by step ") +
        std::to_string(step) + " (lower the learning rate or clip gradients)");
  }

  const TrainConfig& config_;
  const Plan& plan_;
  const Rows& rows_;
  Network net_;
  const ProgressFn& progress_;
  const double progress_interval_s_;
  const std::atomic<bool>* const cancel_;
  LossFn loss_fn_;
  std::unique_ptr<BatchSource> source_;       // the training batches
  std::unique_ptr<BatchSource> pass_source_;  // validation and the residual variance
  const int64_t steps_;
  const bool read_loss_each_step_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  TrainResult result_;
  double best_val_ = INFINITY;
  int64_t since_best_ = 0;
  std::vector<torch::Tensor> best_state_;
  std::string best_optimizer_;
};

}  // namespace

Result<TrainResult> Train(const store::Snapshot& snapshot, const std::string& table_name,
                          const TrainConfig& config, const std::string& checkpoint_path,
                          const ProgressFn& progress, double progress_interval_s,
                          const std::atomic<bool>* cancel) {
  TuneAllocator();
  COHORT_ASSIGN_OR_RETURN(const Plan plan, MakePlan(snapshot, table_name, config));
  return GuardTorch("member " + config.member, [&]() -> Result<TrainResult> {
    // The seeds first: everything below that draws (the validation split, the initial
    // weights, each epoch's order, dropout) draws in this order on every run.
    SetThreads(config.device.threads);
    torch::manual_seed(config.seed);
    std::mt19937_64 rng(config.seed);
    COHORT_ASSIGN_OR_RETURN(const Rows rows, HoldOutValidationRows(*plan.table, config, rng));
    COHORT_ASSIGN_OR_RETURN(Network net, BuildNetwork(plan, rows, config));
    TrainingRun run(config, plan, rows, std::move(net), progress, progress_interval_s, cancel);
    COHORT_RETURN_IF_ERROR(run.Start(snapshot.dir()));
    COHORT_RETURN_IF_ERROR(run.RunEpochs(rng));
    run.RestoreBestEpoch();
    return run.WriteCheckpoint(snapshot, table_name, checkpoint_path);
  });
}

}  // namespace cohort::model
