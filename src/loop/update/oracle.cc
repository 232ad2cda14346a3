#include "loop/update/oracle.h"

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <span>
#include <system_error>

#include "loop/config/class_labels.h"
#include "store/import.h"

namespace cohort::loop {

namespace {

namespace fs = std::filesystem;

store::HostArray IdsArray(const std::vector<uint64_t>& ids) {
  store::HostArray a;
  a.dtype = store::Dtype::kInt64;
  a.shape = {ids.size()};
  a.data.resize(ids.size() * sizeof(int64_t));
  for (size_t i = 0; i < ids.size(); ++i) {
    auto v = static_cast<int64_t>(ids[i]);
    std::memcpy(a.data.data() + i * sizeof(int64_t), &v, sizeof(v));
  }
  return a;
}

bool SameIds(const std::string& path, const store::HostArray& ids) {
  auto old = store::ReadNpyFile(path);
  return old.ok() && old->dtype == ids.dtype && old->shape == ids.shape && old->data == ids.data;
}

}  // namespace

Result<std::optional<store::HostArray>> LabelSamples(
    const LoopConfig& config, const RunPaths& paths, int64_t round, uint64_t generation,
    const store::Table& pool, const store::Table& train, const std::vector<uint64_t>& ids,
    const std::vector<uint64_t>& rows, int64_t classes, Scheduler* scheduler,
    const std::string& relative_dir) {
  if (config.oracle.kind == OracleConfig::Kind::kHiddenLabels) {
    return std::optional<store::HostArray>();
  }
  std::string dir =
      paths.Absolute(relative_dir.empty() ? RunPaths::OracleDir(round) : relative_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IOError("create " + dir + ": " + ec.message());
  std::string ids_path = dir + "/ids.npy";
  std::string features_path = dir + "/features.npy";
  std::string labels_path = dir + "/labels.npy";  // only ever a checked, complete answer
  std::string answer_path = dir + "/answer.npy";  // where the program writes
  const std::string program = config.oracle.command.front();

  store::HostArray id_array = IdsArray(ids);
  bool reuse = fs::exists(labels_path) && SameIds(ids_path, id_array);
  if (!reuse) {
    fs::remove(labels_path, ec);
    fs::remove(answer_path, ec);
    store::HostArray features;
    features.dtype = pool.schema().feature_dtype;
    features.shape = {rows.size()};
    for (uint64_t d : pool.schema().feature_shape) features.shape.push_back(d);
    features.data.resize(rows.size() * pool.schema().feature_row_bytes());
    COHORT_RETURN_IF_ERROR(pool.GatherFeatures(rows, features.data.data()));
    COHORT_RETURN_IF_ERROR(store::WriteNpyFile(ids_path, id_array));
    COHORT_RETURN_IF_ERROR(store::WriteNpyFile(features_path, features));

    launch::SpawnSpec spec;
    spec.argv = config.oracle.command;
    spec.cwd = fs::path(config.path).parent_path().string();
    if (spec.cwd.empty()) spec.cwd = ".";
    spec.stderr_path = dir + "/oracle.log";
    spec.wall_clock_limit =
        std::chrono::milliseconds(static_cast<int64_t>(config.oracle.timeout_s * 1000));
    spec.env = {
        {"COHORT_ORACLE_IDS", ids_path},       {"COHORT_ORACLE_FEATURES", features_path},
        {"COHORT_ORACLE_LABELS", answer_path}, {"COHORT_ROUND", std::to_string(round)},
        {"COHORT_STORE", paths.store()},       {"COHORT_GENERATION", std::to_string(generation)},
        {"COHORT_RUN_DIR", paths.root}};
    auto exit = scheduler->RunProgram(spec);
    if (!exit.ok()) return exit.status().WithContext("oracle " + program);
    if (exit->reason == launch::ExitReason::kKilledForWallClock) {
      return Status::InvalidArgument(fmt::format(
          "oracle {} did not answer within {} s (oracle.timeout_s) and was killed (its log: {})",
          program, config.oracle.timeout_s, spec.stderr_path));
    }
    if (exit->reason != launch::ExitReason::kExited || exit->exit_code != 0) {
      return Status::InvalidArgument("oracle " + program + " " + exit->ToString() +
                                     " (its log: " + spec.stderr_path + ")");
    }
  }
  const std::string& read_path = reuse ? labels_path : answer_path;
  auto labels = store::ReadNpyFile(read_path);
  if (!labels.ok()) {
    return labels.status().WithContext("oracle " + program + " did not write usable labels");
  }
  Result<store::HostArray> converted = train.schema().label_kind == store::LabelKind::kClass
                                           ? store::ToClassLabels(std::move(*labels), read_path)
                                           : store::ToVectorLabels(std::move(*labels), read_path);
  if (!converted.ok()) return converted.status();
  if (converted->shape.empty() || converted->shape[0] != ids.size()) {
    return Status::InvalidArgument(
        read_path + ": " + std::to_string(converted->shape.empty() ? 0 : converted->shape[0]) +
        " labels for " + std::to_string(ids.size()) + " samples");
  }
  if (converted->dtype == store::Dtype::kInt64) {
    std::span<const int64_t> values(reinterpret_cast<const int64_t*>(converted->data.data()),
                                    ids.size());
    COHORT_RETURN_IF_ERROR(CheckClassLabels(
        "oracle " + program + ": " + read_path, values, ids, classes,
        "the run has " + std::to_string(classes) +
            " classes (the members' `classes`, else one more than the largest stored label)"));
  }
  // Kept under its final name only now, so a resume reuses nothing but a complete answer.
  if (!reuse) COHORT_RETURN_IF_ERROR(store::Env::Default()->RenameFile(answer_path, labels_path));
  return std::optional<store::HostArray>(std::move(*converted));
}

}  // namespace cohort::loop
