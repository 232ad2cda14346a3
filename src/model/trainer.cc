// Train(): one member's training loop, in the style of pytorch/examples (cpp): plain
// libtorch, a Sequential network, an optimizer, a loop over batches.
#include <malloc.h>

#include <chrono>
#include <cmath>
#include <mutex>
#include <random>
#include <sstream>

#include "model/batch_pipeline.h"
#include "model/checkpoint.h"
#include "model/member.h"
#include "model/network.h"
#include "model/task.h"
#include "model/tensors.h"

namespace cohort::model {

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// glibc returns large tensors to the OS after every step and faults them back in on the
// next; raising the thresholds keeps them (docs/development.md: ~+25% samples/s).
void TuneAllocator() {
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
  });
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

Status ValidateConfig(const TrainConfig& c) {
  auto bad = [&](const std::string& field, const std::string& why) {
    return Status::InvalidArgument("member " + c.member + ": " + field + " " + why);
  };
  if (c.optimizer.name != "adam" && c.optimizer.name != "adamw" && c.optimizer.name != "sgd") {
    return bad("optimizer '" + c.optimizer.name + "'", "is unknown (adam, adamw, sgd)");
  }
  if (!(c.optimizer.learning_rate > 0)) return bad("learning_rate", "must be > 0");
  if (c.optimizer.weight_decay < 0) return bad("weight_decay", "must be >= 0");
  const auto& s = c.schedule.name;
  if (s != "constant" && s != "step" && s != "cosine") {
    return bad("schedule '" + s + "'", "is unknown (constant, step, cosine)");
  }
  if (c.schedule.step_epochs < 1) return bad("step_epochs", "must be >= 1");
  if (c.schedule.warmup_epochs < 0) return bad("warmup_epochs", "must be >= 0");
  if (c.batch_size < 1) return bad("batch_size", "must be >= 1");
  if (c.epochs < 1) return bad("epochs", "must be >= 1");
  if (c.validation_fraction < 0 || c.validation_fraction >= 1) {
    return bad("validation_fraction", "must be in [0, 1)");
  }
  if (c.patience < 0) return bad("patience", "must be >= 0");
  if (c.grad_clip_norm < 0) return bad("grad_clip_norm", "must be >= 0");
  if (c.label_smoothing < 0 || c.label_smoothing >= 1) {
    return bad("label_smoothing", "must be in [0, 1)");
  }
  if (c.device.threads < 1) return bad("threads", "must be >= 1");
  return Status::OK();
}

}  // namespace

Result<TrainResult> Train(const store::Snapshot& snapshot, const std::string& table_name,
                          const TrainConfig& config, const std::string& checkpoint_path,
                          const ProgressFn& progress, double progress_interval_s,
                          const std::atomic<bool>* cancel) {
  TuneAllocator();
  COHORT_RETURN_IF_ERROR(ValidateConfig(config));
  COHORT_ASSIGN_OR_RETURN(const store::Table* table, snapshot.table(table_name));
  COHORT_ASSIGN_OR_RETURN(MemberMeta meta, DescribeTask(*table, config));
  COHORT_ASSIGN_OR_RETURN(ModelSpec spec, ParseModelSpec(config.model, config.member));
  COHORT_RETURN_IF_ERROR(InferShapes(spec, meta.input_shape, meta.outputs, config.member).status());
  COHORT_ASSIGN_OR_RETURN(torch::Device device, ParseDevice(config.device.device));
  if (table->size() == 0) {
    return Status::InvalidArgument("member " + config.member + ": table " + table_name +
                                   " is empty");
  }

  return GuardTorch("member " + config.member, [&]() -> Result<TrainResult> {
    SetThreads(config.device.threads);
    torch::manual_seed(config.seed);
    std::mt19937_64 rng(config.seed);

    // Validation rows are a seeded sample of the table, held out of training.
    std::vector<uint64_t> train_rows;
    std::vector<uint64_t> val_rows;
    SplitRows(table->size(), config.validation_fraction, rng, &train_rows, &val_rows);
    if (train_rows.empty()) {
      return Status::InvalidArgument("member " + config.member +
                                     ": no training rows left after "
                                     "holding out the validation fraction");
    }

    Network net(spec, meta.input_shape, meta.outputs, meta.standardize);
    if (config.standardize) {
      COHORT_ASSIGN_OR_RETURN(auto moments, FeatureMoments(*table, train_rows, meta));
      net->SetStandardization(moments.first, moments.second);
    }
    if (!config.warm_start_from.empty()) {
      COHORT_ASSIGN_OR_RETURN(LoadedCheckpoint previous,
                              LoadCheckpoint(config.warm_start_from, torch::kCPU));
      if (previous.meta.model != meta.model || previous.meta.input_shape != meta.input_shape ||
          previous.meta.feature_dtype != meta.feature_dtype ||
          previous.meta.outputs != meta.outputs || previous.meta.loss != meta.loss ||
          previous.meta.standardize != meta.standardize) {
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
    }
    net->to(device);
    auto optimizer = MakeOptimizer(config.optimizer, net->parameters());
    if (!config.warm_start_from.empty()) {
      COHORT_RETURN_IF_ERROR(LoadOptimizerState(config.warm_start_from, device, *optimizer));
    }

    TrainResult result;
    for (const auto& p : net->parameters()) result.parameters += p.numel();
    LossFn loss_fn(meta, config.label_smoothing);
    BatchPipeline pipeline(*table, /*with_labels=*/true, config.batch_size);
    std::unique_ptr<BatchPipeline> val_pipeline;
    if (!val_rows.empty()) {
      val_pipeline =
          std::make_unique<BatchPipeline>(*table, /*with_labels=*/true, PassBatchRows(*table, &meta));
    }
    // Batch normalisation cannot train on a batch of one sample: such a last batch is skipped.
    bool has_batchnorm = false;
    for (const auto& l : spec.layers) has_batchnorm |= l.kind == LayerKind::kBatchNorm;
    const auto batch_size = static_cast<uint64_t>(config.batch_size);
    int64_t steps = static_cast<int64_t>((train_rows.size() + batch_size - 1) / batch_size);
    if (has_batchnorm && steps > 1 && train_rows.size() % batch_size == 1) steps--;
    // On a GPU, reading the loss every step would wait for the device: the loss is summed on
    // the device and read (and checked for NaN) when progress is reported and per epoch.
    const bool read_loss_each_step = device.is_cpu();
    double best_val = INFINITY;
    int64_t since_best = 0;
    // The best epoch's weights and optimizer state, kept together so a warm start from this
    // checkpoint continues from a consistent point.
    std::vector<torch::Tensor> best_state;
    std::string best_optimizer;
    auto keep_best = [&] {
      best_state.clear();
      for (const auto& p : net->parameters()) best_state.push_back(p.detach().clone());
      for (const auto& b : net->buffers()) best_state.push_back(b.detach().clone());
      torch::serialize::OutputArchive archive;
      optimizer->save(archive);
      std::ostringstream out;
      archive.save_to(out);
      best_optimizer = out.str();
    };
    auto cancelled = [&] { return cancel != nullptr && cancel->load(); };
    auto check_finite = [&](double value, int64_t epoch, int64_t step) -> Status {
      if (std::isfinite(value)) return Status::OK();
      return Status::InvalidArgument(
          "member " + config.member + ": loss became " + std::to_string(value) + " at epoch " +
          std::to_string(epoch) + (read_loss_each_step ? " step " : " by step ") +
          std::to_string(step) + " (lower the learning rate or clip gradients)");
    };

    const auto run_start = Clock::now();
    for (int64_t epoch = 1; epoch <= config.epochs; epoch++) {
      const auto epoch_start = Clock::now();
      auto last_report = epoch_start;
      net->train();
      pipeline.Start(Shuffled(train_rows, rng));
      double loss_sum = 0;
      torch::Tensor device_loss_sum = torch::zeros({}, torch::TensorOptions().device(device));
      int64_t seen = 0;
      double lr = 0;
      for (int64_t step = 1;; step++) {
        auto t0 = Clock::now();
        COHORT_ASSIGN_OR_RETURN(auto batch, pipeline.Next());
        if (!batch) break;
        if (cancelled()) return Status::Aborted("member " + config.member + ": cancelled");
        if (step > steps) continue;  // the single-sample batch batchnorm cannot use
        auto [x, y] = BatchTensors(*batch, meta, device);
        // Warm-up reaches the base rate at the end of its last step.
        lr = LearningRate(config, static_cast<double>(epoch - 1) +
                                      static_cast<double>(step) / static_cast<double>(steps));
        for (auto& group : optimizer->param_groups()) group.options().set_lr(lr);
        auto t1 = Clock::now();
        torch::Tensor loss = loss_fn(net->forward(x), y);
        auto t2 = Clock::now();
        optimizer->zero_grad();
        loss.backward();
        auto t3 = Clock::now();
        if (config.grad_clip_norm > 0) {
          torch::nn::utils::clip_grad_norm_(net->parameters(), config.grad_clip_norm);
        }
        optimizer->step();
        if (read_loss_each_step) {
          const double value = loss.item<double>();
          COHORT_RETURN_IF_ERROR(check_finite(value, epoch, step));
          loss_sum += value * static_cast<double>(batch->size);
        } else {
          device_loss_sum += loss.detach() * static_cast<double>(batch->size);
        }
        auto t4 = Clock::now();
        result.step_times.data += Seconds(t0, t1);
        result.step_times.forward += Seconds(t1, t2);
        result.step_times.backward += Seconds(t2, t3);
        result.step_times.optimizer += Seconds(t3, t4);
        seen += batch->size;
        const bool report = Seconds(last_report, t4) >= progress_interval_s || step == steps;
        if (report && !read_loss_each_step) {
          loss_sum = device_loss_sum.item<double>();
          COHORT_RETURN_IF_ERROR(check_finite(loss_sum, epoch, step));
        }
        if (progress && report) {
          last_report = t4;
          double elapsed = Seconds(epoch_start, t4);
          progress({epoch, config.epochs, step, steps, loss_sum / static_cast<double>(seen),
                    elapsed > 0 ? static_cast<double>(seen) / elapsed : 0.0, lr});
        }
      }
      if (!read_loss_each_step) {
        loss_sum = device_loss_sum.item<double>();
        COHORT_RETURN_IF_ERROR(check_finite(loss_sum, epoch, steps));
      }
      result.samples += static_cast<uint64_t>(seen);
      EpochMetrics m;
      m.epoch = epoch;
      m.train_loss = loss_sum / static_cast<double>(std::max<int64_t>(seen, 1));
      m.learning_rate = lr;
      if (!val_rows.empty()) {
        COHORT_ASSIGN_OR_RETURN(
            auto val, ValidationLoss(net, loss_fn, *val_pipeline, val_rows, meta, device, cancel));
        m.val_loss = val.first;
        if (meta.classification()) m.val_accuracy = val.second;
        if (val.first < best_val) {
          best_val = val.first;
          since_best = 0;
          result.best_epoch = epoch;
          keep_best();
        } else {
          since_best++;
        }
      } else {
        result.best_epoch = epoch;
      }
      m.seconds = Seconds(epoch_start, Clock::now());
      result.epochs.push_back(m);
      if (config.patience > 0 && since_best >= config.patience) {
        result.stopped_early = epoch < config.epochs;
        break;
      }
    }
    result.seconds = Seconds(run_start, Clock::now());
    if (!best_state.empty() && result.best_epoch != result.epochs.back().epoch) {
      torch::NoGradGuard no_grad;
      size_t i = 0;
      for (auto& p : net->parameters()) p.copy_(best_state[i++]);
      for (auto& b : net->buffers()) b.copy_(best_state[i++]);
      std::istringstream in(best_optimizer);
      torch::serialize::InputArchive archive;
      archive.load_from(in, device);
      optimizer->load(archive);
    }
    if (meta.loss == "mse") {
      COHORT_ASSIGN_OR_RETURN(meta.residual_variance,
                              ResidualVariance(net, *table, train_rows, meta, device));
    }
    meta.training = {{"store", snapshot.dir()},
                     {"generation", snapshot.generation()},
                     {"table", table_name},
                     {"rows", train_rows.size()},
                     {"validation_rows", val_rows.size()},
                     {"epochs", result.epochs.size()},
                     {"best_epoch", result.best_epoch},
                     {"seed", config.seed},
                     {"best_epoch_train_loss", result.epochs[result.best_epoch - 1].train_loss}};
    if (cancelled()) return Status::Aborted("member " + config.member + ": cancelled");
    net->to(torch::kCPU);
    COHORT_RETURN_IF_ERROR(SaveCheckpoint(checkpoint_path, meta, net, optimizer.get()));
    result.checkpoint = checkpoint_path;
    return result;
  });
}

}  // namespace cohort::model
