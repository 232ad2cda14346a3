#include "loop/schedule/script_member.h"

#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "common/worker_protocol.h"
#include "loop/run/run_dir.h"
#include "store/env.h"

namespace cohort::loop {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string InDir(const std::string& dir, std::string_view name) {
  return dir + "/" + std::string(name);
}

json SpecOf(const ScriptAttempt& a) {
  const StoreConfig& tables = a.config->store;
  const MemberConfig& member = a.config->members[a.member_index];
  json predictions = {{"pool", InDir(a.out_dir, protocol::file::kPoolPredictions)},
                      {"test", InDir(a.out_dir, protocol::file::kTestPredictions)}};
  if (a.predict_train) predictions["train"] = InDir(a.out_dir, protocol::file::kTrainPredictions);
  return {
      {"version", protocol::kVersion},
      {"store", a.store},
      {"generation", a.generation},
      {"tables", {{"train", tables.train}, {"pool", tables.pool}, {"test", tables.test}}},
      {"member", member.name},
      {"member_index", a.member_index},
      {"round", a.round},
      {"attempt", a.attempt},
      {"device", a.device.ToString()},
      {"torch_device", a.device.is_cuda() ? "cuda:0" : "cpu"},
      {"threads", a.threads},
      {"out_dir", a.out_dir},
      {"predictions", predictions},
      {"checkpoint", InDir(a.out_dir, protocol::file::kScriptCheckpoint)},
      {"warm_start_from", a.warm_start_from.empty() ? json(nullptr) : json(a.warm_start_from)},
      {"heartbeat_timeout_s", std::chrono::duration<double>(a.heartbeat_timeout).count()},
      {"config", member.script_config.is_null() ? json::object() : member.script_config},
  };
}

}  // namespace

namespace {
// "3,2" for targets of shape (3, 2); "" for a classification run.
std::string TargetShapeText(const std::vector<uint64_t>& shape) {
  std::string text;
  for (uint64_t d : shape) text += (text.empty() ? "" : ",") + std::to_string(d);
  return text;
}
}  // namespace

Result<launch::SpawnSpec> PrepareScriptAttempt(const ScriptAttempt& a) {
  std::error_code ec;
  fs::remove_all(a.out_dir, ec);
  fs::create_directories(a.out_dir, ec);
  if (ec) return Status::IOError("create " + a.out_dir + ": " + ec.message());
  std::string spec_path = InDir(a.out_dir, protocol::file::kScriptSpec);
  COHORT_RETURN_IF_ERROR(
      WriteFileAtomically(store::Env::Default(), spec_path, SpecOf(a).dump(2) + "\n"));

  const MemberConfig& member = a.config->members[a.member_index];
  const StoreConfig& tables = a.config->store;
  launch::SpawnSpec sp;
  sp.argv = member.command;
  sp.env = launch::DeviceEnvironment(a.device, a.threads, a.cpu_count);
  std::vector<std::pair<std::string, std::string>> vars = {
      {"COHORT_SPEC", spec_path},
      {"COHORT_STORE", a.store},
      {"COHORT_GENERATION", std::to_string(a.generation)},
      {"COHORT_TRAIN_TABLE", tables.train},
      {"COHORT_POOL_TABLE", tables.pool},
      {"COHORT_TEST_TABLE", tables.test},
      {"COHORT_CLASSES", std::to_string(a.classes)},
      {"COHORT_TASK", a.task.regression ? "regression" : "classification"},
      {"COHORT_TARGET_SHAPE", TargetShapeText(a.task.target_shape)},
      {"COHORT_MEMBER", member.name},
      {"COHORT_MEMBER_INDEX", std::to_string(a.member_index)},
      {"COHORT_ROUND", std::to_string(a.round)},
      {"COHORT_ATTEMPT", std::to_string(a.attempt)},
      {"COHORT_DEVICE", a.device.ToString()},
      {"COHORT_TORCH_DEVICE", a.device.is_cuda() ? "cuda:0" : "cpu"},
      {"COHORT_THREADS", std::to_string(a.threads)},
      {"COHORT_OUT_DIR", a.out_dir},
      {"COHORT_PREDICT_TRAIN", a.predict_train ? "1" : "0"},
      // Plain print() lines count as signs of life only if they are not held in a buffer.
      {"PYTHONUNBUFFERED", "1"},
  };
  sp.env.insert(sp.env.end(), vars.begin(), vars.end());
  sp.cwd = fs::path(a.config->path).parent_path().string();
  if (sp.cwd.empty()) sp.cwd = ".";
  sp.stderr_path = InDir(a.out_dir, protocol::file::kMemberLog);
  sp.heartbeat_timeout = a.heartbeat_timeout;
  sp.memory_limit_bytes = a.memory_limit_bytes;
  return sp;
}

json NormalizeScriptDone(json done) {
  if (done.contains("metrics") && done["metrics"].is_object()) {
    for (const auto& [k, v] : done["metrics"].items()) {
      if (!done.contains(k)) done[k] = v;
    }
  }
  return done;
}

}  // namespace cohort::loop
