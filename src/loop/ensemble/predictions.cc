#include "loop/ensemble/predictions.h"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <string_view>

#include "common/worker_protocol.h"
#include "loop/ensemble/prediction_stream.h"
#include "loop/ensemble/regression.h"
#include "loop/ensemble/view.h"
#include "store/host_array.h"
#include "store/npy.h"
#include "store/schema.h"
#include "store/snapshot.h"

namespace cohort::loop {

Result<std::vector<float>> ReadMemberPredictions(const std::string& path, const std::string& name,
                                                 uint64_t rows, int64_t expected_classes,
                                                 int64_t* classes, std::span<const uint64_t> ids,
                                                 const std::string& member) {
  return ReadProbabilities(path, name, rows, expected_classes, classes, ids, member, 0);
}

Result<std::vector<float>> ReadDropoutPasses(const std::string& path, const std::string& name,
                                             int64_t passes, uint64_t rows, int64_t classes,
                                             std::span<const uint64_t> ids,
                                             const std::string& member) {
  int64_t width = 0;
  return ReadProbabilities(path, name, rows, classes, &width, ids, member, passes);
}

Result<std::vector<float>> ReadRegressionMemberPredictions(
    const std::string& path, const std::string& name, uint64_t rows,
    const std::vector<uint64_t>& target_shape, std::span<const uint64_t> ids,
    const std::string& member) {
  auto array = store::ReadNpyFile(path);
  if (!array.ok()) return array.status();
  std::vector<uint64_t> want{rows, 2};
  want.insert(want.end(), target_shape.begin(), target_shape.end());
  if (array->dtype != store::Dtype::kFloat32 || array->shape != want) {
    return Status::InvalidArgument(fmt::format(
        "{}: expected float32 means and variances of shape {} (rows, 2, *target shape), got {} "
        "{}",
        name, store::DimsToString(want), store::DtypeName(array->dtype),
        store::DimsToString(array->shape)));
  }
  std::vector<float> values(array->data.size() / sizeof(float));
  if (!values.empty()) std::memcpy(values.data(), array->data.data(), array->data.size());
  int64_t outputs = 1;
  for (uint64_t d : target_shape) outputs *= static_cast<int64_t>(d);
  auto view = MakeRegressionPredictions(values, 1, static_cast<int64_t>(rows), outputs);
  std::vector<std::string> names;
  if (!member.empty()) names.push_back(member);
  if (ids.size() != rows) ids = {};
  Status valid = view.ok() ? ValidateRegressionPredictions(*view, names, ids) : view.status();
  if (!valid.ok()) return Status::InvalidArgument(name + ": " + valid.message());
  return values;
}

std::string CheckAttemptPredictions(const std::string& dir, const PredictionShape& shape, bool pool,
                                    bool train, const std::string& member, int64_t pool_passes) {
  int64_t classes = shape.classes;
  struct File {
    std::string_view name;
    bool wanted;
    uint64_t rows;
    const std::vector<uint64_t>& ids;
  };
  const File files[] = {
      {protocol::file::kPoolPredictions, pool, shape.pool_rows, shape.pool_ids},
      {protocol::file::kTrainPredictions, train, shape.train_rows, shape.train_ids},
      {protocol::file::kTestPredictions, true, shape.test_rows, shape.test_ids}};
  for (const File& file : files) {
    if (!file.wanted) continue;
    const std::string_view name = file.name;
    const uint64_t rows = file.rows;
    const std::vector<uint64_t>& ids = file.ids;
    std::string path = dir + "/" + std::string(name);
    if (!std::filesystem::exists(path)) return "exited 0 without writing " + std::string(name);
    if (shape.task.regression) {
      auto values = ReadRegressionMemberPredictions(path, std::string(name), rows,
                                                    shape.task.target_shape, ids, member);
      if (!values.ok()) return values.status().message();
    } else {
      // A block at a time: a pool of 10^7 rows never sits whole in the controller.
      Status checked =
          CheckPredictionFile(path, std::string(name), rows, classes, &classes, ids, member);
      if (!checked.ok()) return checked.message();
    }
  }
  if (pool && pool_passes > 0 && !shape.task.regression) {
    const std::string_view name = protocol::file::kPoolDropoutPasses;
    std::string path = dir + "/" + std::string(name);
    if (!std::filesystem::exists(path)) return "exited 0 without writing " + std::string(name);
    int64_t width = 0;
    Status checked = CheckPredictionFile(path, std::string(name), shape.pool_rows, classes, &width,
                                         shape.pool_ids, member, pool_passes);
    if (!checked.ok()) return checked.message();
  }
  return "";
}

Result<StackedPredictions> StackPredictions(
    const std::vector<std::pair<size_t, std::string>>& members, uint64_t rows,
    const RunTask& task) {
  StackedPredictions s;
  s.samples = static_cast<int64_t>(rows);
  if (task.regression) {
    s.outputs = task.outputs();
    for (const auto& [index, path] : members) {
      COHORT_ASSIGN_OR_RETURN(std::vector<float> values,
                              ReadRegressionMemberPredictions(path, path, rows, task.target_shape));
      s.data.insert(s.data.end(), values.begin(), values.end());
      s.members += 1;
      s.member_index.push_back(index);
    }
    return s;
  }
  for (const auto& [index, path] : members) {
    int64_t classes = 0;
    COHORT_ASSIGN_OR_RETURN(std::vector<float> values,
                            ReadMemberPredictions(path, path, rows, s.classes, &classes));
    s.classes = classes;
    s.data.insert(s.data.end(), values.begin(), values.end());
    s.members += 1;
    s.member_index.push_back(index);
  }
  return s;
}

Result<StackedPredictions> StackPoolSamples(const std::vector<PoolSampleFile>& files, uint64_t rows,
                                            int64_t classes) {
  StackedPredictions s;
  s.samples = static_cast<int64_t>(rows);
  s.classes = classes;
  for (const PoolSampleFile& f : files) {
    std::vector<float> values;
    if (f.passes == 0) {
      int64_t width = 0;
      COHORT_ASSIGN_OR_RETURN(values, ReadMemberPredictions(f.path, f.path, rows, classes, &width));
    } else {
      COHORT_ASSIGN_OR_RETURN(values, ReadDropoutPasses(f.path, f.path, f.passes, rows, classes));
    }
    s.data.insert(s.data.end(), values.begin(), values.end());
    const int64_t count = f.passes == 0 ? 1 : f.passes;
    s.members += count;
    s.member_index.insert(s.member_index.end(), static_cast<size_t>(count), f.index);
  }
  return s;
}

int64_t RunTask::outputs() const {
  int64_t n = 1;
  for (uint64_t d : target_shape) n *= static_cast<int64_t>(d);
  return n;
}

std::string RunTask::Describe() const {
  if (!regression) return "classification run";
  return "regression run (targets of shape " + store::DimsToString(target_shape) + ")";
}

RunTask RunTaskOf(const store::Table& train) {
  RunTask task;
  task.regression = train.schema().label_kind == store::LabelKind::kVector;
  if (task.regression) task.target_shape = train.schema().label_shape;
  return task;
}

}  // namespace cohort::loop
