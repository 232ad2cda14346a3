#include "loop/schedule/worker_client.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/json_text.h"
#include "common/worker_protocol.h"
#include "loop/acquire/round_seeds.h"
#include "model/config_json.h"

namespace cohort::loop {

namespace {

using nlohmann::json;

// Clamped before the conversion: a double beyond int64 does not convert.
int64_t IntField(const json& event, const char* key) {
  return static_cast<int64_t>(std::clamp(JsonNumberField(event, key).value_or(0), -1e15, 1e15));
}

std::string Str(std::string_view s) { return std::string(s); }

}  // namespace

launch::SpawnSpec WorkerSpawnSpec(const WorkerLaunch& launch, const std::string& log_path,
                                  const std::string& cwd) {
  launch::SpawnSpec spec;
  // The worker beats four times per timeout, so one late beat is never fatal.
  double heartbeat_s =
      std::clamp(std::chrono::duration<double>(launch.heartbeat_timeout).count() / 4.0, 0.05, 2.0);
  spec.argv = {launch.member_binary, "worker",
               "--device",           launch.device.is_cuda() ? "cuda:0" : "cpu",
               "--threads",          std::to_string(launch.threads_per_cpu_device),
               "--heartbeat",        fmt::format("{}", heartbeat_s)};
  spec.env =
      launch::DeviceEnvironment(launch.device, launch.threads_per_cpu_device, launch.cpu_count);
  spec.stderr_path = log_path;
  spec.cwd = cwd;
  spec.heartbeat_timeout = launch.heartbeat_timeout;
  spec.memory_limit_bytes = launch.memory_limit_bytes;
  return spec;
}

json WorkerCommand(WorkerStep step, const AttemptCommandContext& c) {
  json command;
  command["version"] = protocol::kVersion;
  command["store"] = c.store;
  command["generation"] = c.generation;
  command["member"] = c.member->name;
  std::string prefix = fmt::format("r{}/{}/a{}", c.round, c.member->name, c.attempt);
  std::string checkpoint = c.attempt_dir + "/" + Str(protocol::file::kNativeCheckpoint);
  switch (step) {
    case WorkerStep::kTrain: {
      model::TrainConfig train = c.member->train;
      train.member = c.member->name;
      train.warm_start_from = c.warm_start_from;
      if (train.classes == 0) train.classes = c.classes;
      json config = model::TrainConfigToJson(train);
      config.erase("device");  // the worker's own: its --device and --threads
      command["op"] = Str(protocol::op::kTrain);
      command["table"] = c.tables->train;
      command["checkpoint"] = checkpoint;
      command["config"] = std::move(config);
      command["id"] = prefix + "/train";
      break;
    }
    case WorkerStep::kPredictPool:
    case WorkerStep::kPredictTrain:
    case WorkerStep::kPredictTest: {
      const bool pool = step == WorkerStep::kPredictPool;
      const bool train = step == WorkerStep::kPredictTrain;
      command["op"] = Str(protocol::op::kPredict);
      command["table"] = pool ? c.tables->pool : train ? c.tables->train : c.tables->test;
      command["checkpoint"] = checkpoint;
      command["out"] = c.attempt_dir + "/" +
                       Str(pool    ? protocol::file::kPoolPredictions
                           : train ? protocol::file::kTrainPredictions
                                   : protocol::file::kTestPredictions);
      command["id"] = prefix + (pool ? "/pool" : train ? "/train" : "/test");
      if (pool && c.member->train.pool_precision != "auto") {
        command["precision"] = c.member->train.pool_precision;
      }
      if (pool && c.pool_sample > 0) {
        command["sample_rows"] = c.pool_sample;
        command["sample_seed"] = c.pool_sample_seed;
      }
      if (pool && c.member->dropout_passes > 0) {
        // The masks depend on the member's seed and the round, not on the attempt: a retried
        // or resumed attempt samples the same passes.
        command["dropout_passes"] = c.member->dropout_passes;
        command["dropout_seed"] = RoundSeed(c.member->train.seed, c.round);
        command["passes_out"] = c.attempt_dir + "/" + Str(protocol::file::kPoolDropoutPasses);
      }
      break;
    }
  }
  return command;
}

WorkerEventKind KindOf(const json& event) {
  std::string ev = JsonStringField(event, "ev");
  if (ev == protocol::ev::kHello) return WorkerEventKind::kHello;
  if (ev == protocol::ev::kProgress) return WorkerEventKind::kProgress;
  if (ev == protocol::ev::kHeartbeat) return WorkerEventKind::kHeartbeat;
  if (ev == protocol::ev::kDone) return WorkerEventKind::kDone;
  if (ev == protocol::ev::kPredictions) return WorkerEventKind::kPredictions;
  if (ev == protocol::ev::kError) return WorkerEventKind::kError;
  if (ev == protocol::ev::kBye) return WorkerEventKind::kBye;
  return WorkerEventKind::kOther;
}

bool SpeaksOurProtocol(const json& hello) {
  return IntField(hello, "version") == protocol::kVersion;
}

TrainingProgress ProgressOf(const json& event) {
  TrainingProgress p;
  p.epoch = IntField(event, "epoch");
  p.epochs = IntField(event, "epochs");
  p.step = IntField(event, "step");
  p.steps = IntField(event, "steps");
  p.loss = JsonNumberField(event, "loss");
  p.samples_per_second = JsonNumberField(event, "samples_per_second");
  return p;
}

std::vector<EpochRecord> EpochsOf(const json& done) {
  std::vector<EpochRecord> epochs;
  if (!done.contains("epochs") || !done["epochs"].is_array()) return epochs;
  for (const json& e : done["epochs"]) {
    if (!e.is_object()) continue;
    EpochRecord r;
    r.epoch = IntField(e, "epoch");
    r.train_loss = JsonNumberField(e, "train_loss").value_or(0);
    r.val_loss = JsonNumberField(e, "val_loss");
    r.val_accuracy = JsonNumberField(e, "val_accuracy");
    r.lr = JsonNumberField(e, "lr");  // optional: an outside member may not report it
    r.seconds = JsonNumberField(e, "seconds").value_or(0);
    if (!std::isfinite(r.train_loss)) r.train_loss = 0;
    epochs.push_back(r);
  }
  return epochs;
}

json AttemptMetrics(const json& done, bool script, double predict_seconds, double attempt_seconds) {
  json metrics = json::object();
  if (script) {
    if (done.contains("metrics") && done["metrics"].is_object()) metrics = done["metrics"];
    if (JsonNumberField(done, "seconds")) metrics["seconds"] = done["seconds"];
    // Only numbers are metrics; a script's odd values stay in its log.
    for (auto it = metrics.begin(); it != metrics.end();) {
      it = it->is_number() || it->is_boolean() ? std::next(it) : metrics.erase(it);
    }
  }
  for (const char* key : {"seconds", "samples", "best_epoch", "stopped_early", "parameters",
                          "resident_data", "onednn_dense", "step_times"}) {
    if (done.contains(key)) metrics[key] = done[key];
  }
  metrics["predict_seconds"] = predict_seconds;
  metrics["attempt_seconds"] = attempt_seconds;
  return metrics;
}

}  // namespace cohort::loop
