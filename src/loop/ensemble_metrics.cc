#include "loop/ensemble_metrics.h"

#include <algorithm>
#include <cmath>

namespace cohort::loop {
namespace {

// Sums the per-sample terms of every metric; Finish divides by the sample count.
class MetricAccumulator {
 public:
  void Add(const double* p, int64_t classes, int64_t label) {
    const int64_t predicted = std::max_element(p, p + classes) - p;  // first maximum
    const double confidence = p[predicted];
    const double correct = predicted == label ? 1.0 : 0.0;
    count_++;
    correct_ += correct;
    nll_ -= std::log(std::max(p[label], kNllProbabilityFloor));
    for (int64_t c = 0; c < classes; c++) {
      const double d = p[c] - (c == label ? 1.0 : 0.0);
      brier_ += d * d;
    }
    // Bin b holds confidences in [b/15, (b+1)/15); the last bin also takes 1.
    const int b = std::min(kEceBins - 1, static_cast<int>(confidence * kEceBins));
    bin_confidence_[b] += confidence;
    bin_correct_[b] += correct;
    bin_count_[b]++;
  }

  ClassificationMetrics Finish() const {
    ClassificationMetrics m;
    m.count = count_;
    for (int b = 0; b < kEceBins; b++) {
      ReliabilityBin bin;
      bin.lower = static_cast<double>(b) / kEceBins;
      bin.upper = static_cast<double>(b + 1) / kEceBins;
      bin.count = bin_count_[b];
      if (bin.count > 0) {
        bin.confidence = bin_confidence_[b] / static_cast<double>(bin.count);
        bin.accuracy = bin_correct_[b] / static_cast<double>(bin.count);
      }
      m.bins.push_back(bin);
    }
    if (count_ == 0) return m;
    const auto n = static_cast<double>(count_);
    m.accuracy = correct_ / n;
    m.nll = nll_ / n;
    m.brier = brier_ / n;
    // |bin|/n * |acc - conf| = |sum correct - sum confidence| / n for each bin.
    for (int b = 0; b < kEceBins; b++) m.ece += std::abs(bin_correct_[b] - bin_confidence_[b]);
    m.ece /= n;
    return m;
  }

 private:
  int64_t count_ = 0;
  double correct_ = 0;
  double nll_ = 0;
  double brier_ = 0;
  double bin_confidence_[kEceBins] = {};
  double bin_correct_[kEceBins] = {};
  int64_t bin_count_[kEceBins] = {};
};

}  // namespace

std::map<std::string, double> ClassificationMetrics::ToMap() const {
  return {{"count", static_cast<double>(count)},
          {"accuracy", accuracy},
          {"nll", nll},
          {"brier", brier},
          {"ece", ece}};
}

Result<EnsembleMetrics> ComputeEnsembleMetrics(const EnsemblePredictions& predictions,
                                               const std::vector<int64_t>& labels) {
  COHORT_RETURN_IF_ERROR(ValidatePredictions(predictions));
  const EnsemblePredictions& p = predictions;
  if (static_cast<int64_t>(labels.size()) != p.samples) {
    return Status::InvalidArgument(std::to_string(labels.size()) + " labels for " +
                                   std::to_string(p.samples) + " samples");
  }
  for (int64_t i = 0; i < p.samples; i++) {
    if (labels[i] < 0 || labels[i] >= p.classes) {
      return Status::InvalidArgument("sample " + std::to_string(i) + " has label " +
                                     std::to_string(labels[i]) + ", outside [0, " +
                                     std::to_string(p.classes) + ")");
    }
  }

  const int64_t C = p.classes;
  const double inv_m = 1.0 / static_cast<double>(p.members);
  std::vector<MetricAccumulator> members(static_cast<size_t>(p.members));
  MetricAccumulator ensemble;
  std::vector<double> row(static_cast<size_t>(C));
  std::vector<double> mean(static_cast<size_t>(C));
  for (int64_t i = 0; i < p.samples; i++) {
    std::fill(mean.begin(), mean.end(), 0.0);
    for (int64_t m = 0; m < p.members; m++) {
      const float* r = p.row(m, i);
      for (int64_t c = 0; c < C; c++) {
        row[c] = r[c];
        mean[c] += r[c];
      }
      members[m].Add(row.data(), C, labels[i]);
    }
    for (int64_t c = 0; c < C; c++) mean[c] *= inv_m;
    ensemble.Add(mean.data(), C, labels[i]);
  }

  EnsembleMetrics out;
  for (const MetricAccumulator& a : members) out.members.push_back(a.Finish());
  out.ensemble = ensemble.Finish();
  return out;
}

}  // namespace cohort::loop
