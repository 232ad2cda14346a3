#include "loop/predictions.h"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <string_view>

#include "common/worker_protocol.h"
#include "loop/acquisition.h"
#include "store/host_array.h"
#include "store/npy.h"
#include "store/schema.h"

namespace cohort::loop {

Result<std::vector<float>> ReadMemberPredictions(const std::string& path, const std::string& name,
                                                 uint64_t rows, int64_t expected_classes,
                                                 int64_t* classes, std::span<const uint64_t> ids,
                                                 const std::string& member) {
  auto array = store::ReadNpyFile(path);
  if (!array.ok()) return array.status();
  if (array->dtype != store::Dtype::kFloat32 || array->shape.size() != 2 ||
      array->shape[0] != rows || array->shape[1] < 2) {
    return Status::InvalidArgument(
        fmt::format("{}: expected float32 probabilities of shape ({}, classes), got {} {}", name,
                    rows, store::DtypeName(array->dtype), store::DimsToString(array->shape)));
  }
  auto width = static_cast<int64_t>(array->shape[1]);
  if (expected_classes > 0 && width != expected_classes) {
    return Status::InvalidArgument(
        fmt::format("{}: {} classes where the run has {}", name, width, expected_classes));
  }
  std::vector<float> values(array->data.size() / sizeof(float));
  if (!values.empty()) std::memcpy(values.data(), array->data.data(), array->data.size());
  auto view = MakeEnsemblePredictions(values, 1, static_cast<int64_t>(rows), width);
  std::vector<std::string> names;
  if (!member.empty()) names.push_back(member);
  if (ids.size() != rows) ids = {};
  Status valid = view.ok() ? ValidatePredictions(*view, names, ids) : view.status();
  if (!valid.ok()) return Status::InvalidArgument(name + ": " + valid.message());
  *classes = width;
  return values;
}

std::string CheckAttemptPredictions(const std::string& dir, const PredictionShape& shape, bool pool,
                                    const std::string& member) {
  int64_t classes = shape.classes;
  for (std::string_view name :
       {protocol::file::kPoolPredictions, protocol::file::kTestPredictions}) {
    bool is_pool = name == protocol::file::kPoolPredictions;
    if (is_pool && !pool) continue;
    std::string path = dir + "/" + std::string(name);
    if (!std::filesystem::exists(path)) return "exited 0 without writing " + std::string(name);
    auto values =
        ReadMemberPredictions(path, std::string(name), is_pool ? shape.pool_rows : shape.test_rows,
                              classes, &classes, is_pool ? shape.pool_ids : shape.test_ids, member);
    if (!values.ok()) return values.status().message();
  }
  return "";
}

Result<StackedPredictions> StackPredictions(
    const std::vector<std::pair<size_t, std::string>>& members, uint64_t rows) {
  StackedPredictions s;
  s.samples = static_cast<int64_t>(rows);
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

}  // namespace cohort::loop
