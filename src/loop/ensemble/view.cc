#include "loop/ensemble/view.h"

#include <cmath>
#include <limits>

namespace cohort::loop {

std::string DescribePredictionRow(int64_t member, int64_t sample,
                                  std::span<const std::string> member_names,
                                  std::span<const uint64_t> sample_ids) {
  auto m = static_cast<size_t>(member);
  auto i = static_cast<size_t>(sample);
  std::string who =
      m < member_names.size() ? "member " + member_names[m] : "member " + std::to_string(member);
  std::string what = i < sample_ids.size() ? "row " + std::to_string(sample) + " (sample id " +
                                                 std::to_string(sample_ids[i]) + ")"
                                           : "row " + std::to_string(sample);
  return who + " " + what;
}

std::optional<uint64_t> PredictionElementCount(std::initializer_list<int64_t> dims) {
  const auto max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t n = 1;
  for (int64_t d : dims) {
    if (d != 0 && n > max / static_cast<uint64_t>(d)) return std::nullopt;
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

Result<EnsemblePredictions> MakeEnsemblePredictions(const std::vector<float>& data, int64_t members,
                                                    int64_t samples, int64_t classes) {
  if (members < 0 || samples < 0 || classes < 0) {
    return Status::InvalidArgument("negative prediction shape (" + std::to_string(members) + ", " +
                                   std::to_string(samples) + ", " + std::to_string(classes) + ")");
  }
  const std::optional<uint64_t> count = PredictionElementCount({members, samples, classes});
  if (!count) return Status::InvalidArgument("prediction shape overflows");
  const uint64_t n = *count;
  if (n != data.size()) {
    return Status::InvalidArgument("predictions hold " + std::to_string(data.size()) +
                                   " values, shape (" + std::to_string(members) + ", " +
                                   std::to_string(samples) + ", " + std::to_string(classes) +
                                   ") needs " + std::to_string(n));
  }
  EnsemblePredictions p;
  p.members = members;
  p.samples = samples;
  p.classes = classes;
  p.data = data.data();
  return p;
}

Status ValidatePredictions(const EnsemblePredictions& predictions,
                           std::span<const std::string> member_names,
                           std::span<const uint64_t> sample_ids, int64_t first_row) {
  const EnsemblePredictions& p = predictions;
  if (p.members < 1) return Status::InvalidArgument("predictions have no members");
  if (p.classes < 2) {
    return Status::InvalidArgument("predictions have " + std::to_string(p.classes) +
                                   " classes, need at least 2");
  }
  if (p.samples < 0) {
    return Status::InvalidArgument("predictions have " + std::to_string(p.samples) + " samples");
  }
  if (p.samples > 0 && p.data == nullptr) {
    return Status::InvalidArgument("predictions have no data");
  }
  for (int64_t m = 0; m < p.members; m++) {
    for (int64_t i = 0; i < p.samples; i++) {
      const float* row = p.row(m, i);
      double sum = 0;
      for (int64_t c = 0; c < p.classes; c++) {
        const float v = row[c];
        if (!std::isfinite(v) || v < 0) {
          return Status::InvalidArgument(
              DescribePredictionRow(m, first_row + i, member_names, sample_ids) +
              ": probability of class " + std::to_string(c) + " is " + std::to_string(v));
        }
        sum += v;
      }
      if (std::abs(sum - 1.0) > kProbabilitySumTolerance) {
        return Status::InvalidArgument(
            DescribePredictionRow(m, first_row + i, member_names, sample_ids) +
            ": probabilities sum to " + std::to_string(sum) + ", not 1");
      }
    }
  }
  return Status::OK();
}

Result<RegressionPredictions> MakeRegressionPredictions(const std::vector<float>& data,
                                                        int64_t members, int64_t samples,
                                                        int64_t outputs) {
  std::string shape = "(";  // appended, not "(" + ...: GCC 12 warns falsely (-Wrestrict) on that
  shape += std::to_string(members) + ", " + std::to_string(samples) + ", 2, " +
           std::to_string(outputs) + ")";
  if (members < 0 || samples < 0 || outputs < 0) {
    return Status::InvalidArgument("negative regression prediction shape " + shape);
  }
  const std::optional<uint64_t> count =
      PredictionElementCount({members, samples, int64_t{2}, outputs});
  if (!count) {
    return Status::InvalidArgument("regression prediction shape " + shape + " overflows");
  }
  const uint64_t n = *count;
  if (n != data.size()) {
    return Status::InvalidArgument("regression predictions hold " + std::to_string(data.size()) +
                                   " values, shape " + shape + " needs " + std::to_string(n));
  }
  RegressionPredictions p;
  p.members = members;
  p.samples = samples;
  p.outputs = outputs;
  p.data = data.data();
  return p;
}

Status ValidateRegressionPredictions(const RegressionPredictions& predictions,
                                     std::span<const std::string> member_names,
                                     std::span<const uint64_t> sample_ids) {
  const RegressionPredictions& p = predictions;
  if (p.members < 1) return Status::InvalidArgument("regression predictions have no members");
  if (p.outputs < 1) {
    return Status::InvalidArgument("regression predictions have " + std::to_string(p.outputs) +
                                   " outputs, need at least 1");
  }
  if (p.samples < 0) {
    return Status::InvalidArgument("regression predictions have " + std::to_string(p.samples) +
                                   " samples");
  }
  if (p.samples > 0 && p.data == nullptr) {
    return Status::InvalidArgument("regression predictions have no data");
  }
  for (int64_t m = 0; m < p.members; m++) {
    for (int64_t i = 0; i < p.samples; i++) {
      const float* mean = p.mean(m, i);
      const float* variance = p.variance(m, i);
      for (int64_t d = 0; d < p.outputs; d++) {
        if (!std::isfinite(mean[d])) {
          return Status::InvalidArgument(DescribePredictionRow(m, i, member_names, sample_ids) +
                                         ": mean of component " + std::to_string(d) + " is " +
                                         std::to_string(mean[d]));
        }
        if (!std::isfinite(variance[d]) || variance[d] < 0) {
          return Status::InvalidArgument(DescribePredictionRow(m, i, member_names, sample_ids) +
                                         ": variance of component " + std::to_string(d) + " is " +
                                         std::to_string(variance[d]) +
                                         " (must be finite and >= 0)");
        }
      }
    }
  }
  return Status::OK();
}

}  // namespace cohort::loop
