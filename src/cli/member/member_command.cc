#include "cli/member/member_command.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/file_util.h"
#include "model/member.h"
#include "store/snapshot.h"
#include "worker/worker.h"

namespace cohort::cli {

using nlohmann::json;

namespace {

struct MemberOptions {
  std::string store;
  std::string table;
  std::optional<uint64_t> generation;
  std::string out;
  std::string precision;  // predict --precision; empty: the member's
  std::string checkpoint;
  bool json = false;
  model::TrainConfig config;
  worker::WorkerOptions worker;
};

std::string FormatMetric(double v) { return fmt::format("{:.4f}", v); }

Status RunTrain(const MemberOptions& o) {
  COHORT_ASSIGN_OR_RETURN(auto snap, store::Snapshot::Open(o.store, o.generation));
  const bool live = !o.json;
  auto progress = [&](const model::Progress& p) {
    if (!live || p.step != p.steps_per_epoch) return;
    fmt::print("epoch {:>3}/{}  loss {:.4f}  {:>8.0f} samples/s  lr {:.2e}\n", p.epoch, p.epochs,
               p.loss, p.samples_per_second, p.learning_rate);
    std::fflush(stdout);
  };
  COHORT_ASSIGN_OR_RETURN(model::TrainResult r,
                          model::Train(*snap, o.table, o.config, o.out, progress));
  if (o.json) {
    json epochs = json::array();
    for (const auto& e : r.epochs) {
      json je = {{"epoch", e.epoch},
                 {"train_loss", e.train_loss},
                 {"lr", e.learning_rate},
                 {"seconds", e.seconds}};
      if (e.val_loss) je["val_loss"] = *e.val_loss;
      if (e.val_accuracy) je["val_accuracy"] = *e.val_accuracy;
      epochs.push_back(je);
    }
    json j = {
        {"checkpoint", r.checkpoint},
        {"generation", snap->generation()},
        {"epochs", epochs},
        {"best_epoch", r.best_epoch},
        {"stopped_early", r.stopped_early},
        {"samples", r.samples},
        {"seconds", r.seconds},
        {"samples_per_second", r.seconds > 0 ? static_cast<double>(r.samples) / r.seconds : 0},
        {"parameters", r.parameters},
        {"resident_data", r.resident_data},
        {"onednn_dense", r.onednn_dense},
        {"step_times",
         {{"data", r.step_times.data},
          {"forward", r.step_times.forward},
          {"backward", r.step_times.backward},
          {"optimizer", r.step_times.optimizer}}}};
    fmt::print("{}\n", j.dump(2));
    return Status::OK();
  }
  for (const auto& e : r.epochs) {
    if (e.val_loss) {
      fmt::print("epoch {:>3}: val_loss {:.4f}{}\n", e.epoch, *e.val_loss,
                 e.val_accuracy ? fmt::format("  val_accuracy {:.4f}", *e.val_accuracy) : "");
    }
  }
  if (r.stopped_early) fmt::print("stopped early; kept epoch {}\n", r.best_epoch);
  fmt::print("trained {} ({} parameters) on {} of generation {}: {:.1f} s, {:.0f} samples/s\n",
             o.config.member, r.parameters, o.table, snap->generation(), r.seconds,
             r.seconds > 0 ? static_cast<double>(r.samples) / r.seconds : 0.0);
  fmt::print("wrote {}\n", r.checkpoint);
  return Status::OK();
}

Status RunEval(const MemberOptions& o) {
  COHORT_ASSIGN_OR_RETURN(auto snap, store::Snapshot::Open(o.store, o.generation));
  COHORT_ASSIGN_OR_RETURN(auto metrics,
                          model::Evaluate(o.checkpoint, *snap, o.table, o.config.device));
  if (o.json) {
    json j(metrics);
    j["table"] = o.table;
    j["generation"] = snap->generation();
    fmt::print("{}\n", j.dump(2));
    return Status::OK();
  }
  fmt::print("{} on {} (generation {}):", o.checkpoint, o.table, snap->generation());
  for (const auto& [name, value] : metrics) {
    fmt::print("  {} {}", name,
               name == "count" ? fmt::format("{:.0f}", value) : FormatMetric(value));
  }
  fmt::print("\n");
  return Status::OK();
}

Status RunPredict(const MemberOptions& o) {
  COHORT_ASSIGN_OR_RETURN(auto snap, store::Snapshot::Open(o.store, o.generation));
  model::PredictOptions options;
  options.precision = o.precision;
  COHORT_ASSIGN_OR_RETURN(
      auto r, model::Predict(o.checkpoint, *snap, o.table, o.out, o.config.device, options));
  std::string shape;
  for (int64_t d : r.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  fmt::print("wrote {} ({} rows of {}, shape ({}))\n", r.path, r.rows, o.table, shape);
  return Status::OK();
}

void AddDeviceOptions(CLI::App* cmd, MemberOptions* o) {
  cmd->add_option("--device", o->config.device.device, "cpu, cuda or cuda:N (default cpu)");
  cmd->add_option("--threads", o->config.device.threads, "Intra-op threads on CPU (default 1)")
      ->check(CLI::PositiveNumber);
}

void AddSnapshotOptions(CLI::App* cmd, MemberOptions* o, const char* default_table) {
  cmd->add_option("--store", o->store, "Store directory")->required();
  cmd->add_option("--table", o->table, std::string("Table (usually ") + default_table + ")")
      ->required();
  cmd->add_option("--generation,-g", o->generation, "Generation (default: current)");
}

}  // namespace

void AddMemberCommands(CLI::App& app, std::function<Status()>* run) {
  auto o = std::make_shared<MemberOptions>();
  model::TrainConfig& c = o->config;

  auto* train = app.add_subcommand("train", "Train one member on a store table");
  AddSnapshotOptions(train, o.get(), "train");
  train
      ->add_option("--model", c.model, "Layer spec, e.g. \"dense 256 relu, dropout 0.1, dense 10\"")
      ->required();
  train->add_option("--out,-o", o->out, "Checkpoint to write")->required();
  train->add_option("--member", c.member, "Member name (for messages; default member)");
  train->add_option("--epochs", c.epochs, "Epochs (default 10)");
  train->add_option("--seed", c.seed, "Seed (default 0)");
  train->add_option("--batch-size", c.batch_size, "Batch size (default 64)");
  train->add_option("--optimizer", c.optimizer.name, "adam, adamw or sgd (default adam)");
  train->add_option("--lr", c.optimizer.learning_rate, "Learning rate (default 1e-3)");
  train->add_option("--weight-decay", c.optimizer.weight_decay, "Weight decay (default 0)");
  train->add_option("--momentum", c.optimizer.momentum, "SGD momentum (default 0.9)");
  train->add_option("--schedule", c.schedule.name, "constant, step or cosine (default constant)");
  train->add_option("--warmup-epochs", c.schedule.warmup_epochs, "Linear warm-up epochs");
  train->add_option("--step-epochs", c.schedule.step_epochs, "step schedule: epochs per decay");
  train->add_option("--gamma", c.schedule.gamma, "step schedule: decay factor (default 0.1)");
  train->add_option("--loss", c.loss, "auto, cross_entropy, mse or gaussian_nll");
  train->add_option("--label-smoothing", c.label_smoothing, "Label smoothing (default 0)");
  train->add_option("--classes", c.classes, "Class count (default: largest label + 1)");
  train->add_flag("--standardize", c.standardize, "Standardise features per feature");
  train->add_option("--grad-clip", c.grad_clip_norm, "Clip the gradient norm (0: off)");
  train->add_option("--validation-fraction", c.validation_fraction,
                    "Hold out this fraction for validation and early stopping");
  train->add_option("--patience", c.patience, "Early stopping patience in epochs (0: off)");
  train->add_option("--warm-start", c.warm_start_from, "Continue from this checkpoint");
  train->add_option("--precision", c.precision, "fp32 or bf16 (dense and convolution layers)");
  train->add_flag("--json", o->json, "Print the training summary as JSON");
  AddDeviceOptions(train, o.get());
  train->callback([o, run] { *run = [o] { return RunTrain(*o); }; });

  auto* eval = app.add_subcommand("eval", "Evaluate a checkpoint on a store table");
  AddSnapshotOptions(eval, o.get(), "test");
  eval->add_option("--checkpoint", o->checkpoint, "Checkpoint")->required();
  eval->add_flag("--json", o->json, "Print JSON (accuracy, nll, brier, ece or rmse, nll)");
  AddDeviceOptions(eval, o.get());
  eval->callback([o, run] { *run = [o] { return RunEval(*o); }; });

  auto* predict =
      app.add_subcommand("predict", "Write a checkpoint's predictions for a table as .npy");
  AddSnapshotOptions(predict, o.get(), "pool");
  predict->add_option("--checkpoint", o->checkpoint, "Checkpoint")->required();
  predict->add_option("--out,-o", o->out, "Output .npy")->required();
  predict->add_option("--precision", o->precision,
                      "fp32 or bf16 (default: the precision the member trained in)");
  AddDeviceOptions(predict, o.get());
  predict->callback([o, run] { *run = [o] { return RunPredict(*o); }; });

  // `cohort export` runs this: CHECKPOINT DIR pairs, each written as DIR/member.json and
  // the .npy files it names (model::ExportMember).
  auto export_paths = std::make_shared<std::vector<std::string>>();
  auto* exp = app.add_subcommand("export-member",
                                 "Write checkpoints as .npy weights and JSON (cohort export)");
  exp->add_option("pairs", *export_paths, "CHECKPOINT DIR [CHECKPOINT DIR ...]")->required();
  exp->callback([export_paths, run] {
    *run = [export_paths]() -> Status {
      if (export_paths->size() % 2 != 0) {
        return Status::InvalidArgument("export-member takes CHECKPOINT DIR pairs");
      }
      for (size_t i = 0; i < export_paths->size(); i += 2) {
        const std::string& dir = (*export_paths)[i + 1];
        COHORT_ASSIGN_OR_RETURN(json j, model::ExportMember((*export_paths)[i], dir));
        const std::string text = j.dump(2) + "\n";
        COHORT_RETURN_IF_ERROR(
            WriteFileAtomically(dir + "/member.json",
                                {std::as_bytes(std::span<const char>(text.data(), text.size()))}));
      }
      return Status::OK();
    };
  });

  auto* worker = app.add_subcommand(
      "worker", "Serve train/predict/evaluate commands on stdin (driven by the loop)");
  worker->add_option("--device", o->worker.device, "Default device (default cpu)");
  worker->add_option("--threads", o->worker.threads, "Default intra-op threads (default 1)")
      ->check(CLI::PositiveNumber);
  worker
      ->add_option("--heartbeat", o->worker.heartbeat_interval_s,
                   "Seconds between heartbeats (default 2)")
      ->check(CLI::PositiveNumber);
  worker->add_option("--log-file", o->worker.log_file,
                     "Append the log to this file instead of stderr (used under Slurm)");
  worker->callback([o, run] {
    *run = [o]() -> Status {
      int code = worker::RunWorker(o->worker);
      if (code != 0) return Status::Aborted("worker exited with status " + std::to_string(code));
      return Status::OK();
    };
  });
}

}  // namespace cohort::cli
