#include "loop/ensemble/metrics.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "common/splitmix.h"

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

Result<EceRange> PerfectlyCalibratedEce(std::span<const float> probabilities, int64_t classes,
                                        int draws, uint64_t seed) {
  if (classes < 1) return Status::InvalidArgument("classes must be >= 1");
  if (probabilities.size() % static_cast<size_t>(classes) != 0) {
    return Status::InvalidArgument(std::to_string(probabilities.size()) +
                                   " probabilities are not rows of " + std::to_string(classes));
  }
  if (probabilities.empty()) return Status::InvalidArgument("no rows");
  if (draws < 1) return Status::InvalidArgument("draws must be >= 1");
  const auto row_size = static_cast<size_t>(classes);
  const size_t rows = probabilities.size() / row_size;
  // Only each row's confidence and bin matter: the drawn label is the predicted class with
  // probability equal to the confidence, and then the row counts as right.
  std::vector<double> confidence(rows);
  std::vector<size_t> bin(rows);
  std::array<double, kEceBins> bin_confidence{};
  for (size_t i = 0; i < rows; i++) {
    const float* p = probabilities.data() + i * row_size;
    confidence[i] = std::clamp<double>(*std::max_element(p, p + classes), 0.0, 1.0);
    // The bins of MetricAccumulator::Add.
    bin[i] =
        static_cast<size_t>(std::min(kEceBins - 1, static_cast<int>(confidence[i] * kEceBins)));
    bin_confidence[bin[i]] += confidence[i];
  }
  uint64_t state = seed;
  std::vector<double> eces;
  eces.reserve(static_cast<size_t>(draws));
  for (int d = 0; d < draws; d++) {
    std::array<double, kEceBins> bin_correct{};
    for (size_t i = 0; i < rows; i++) {
      if (SplitMix64Unit(&state) < confidence[i]) bin_correct[bin[i]] += 1;
    }
    double ece = 0;
    for (size_t b = 0; b < kEceBins; b++) ece += std::abs(bin_correct[b] - bin_confidence[b]);
    eces.push_back(ece / static_cast<double>(rows));
  }
  std::sort(eces.begin(), eces.end());
  auto percentile = [&](double q) {
    const double at = q * static_cast<double>(eces.size() - 1);
    const auto below = static_cast<size_t>(at);
    const size_t above = std::min(below + 1, eces.size() - 1);
    return eces[below] + (at - static_cast<double>(below)) * (eces[above] - eces[below]);
  };
  EceRange out;
  for (double e : eces) out.mean += e;
  out.mean /= static_cast<double>(eces.size());
  out.low = percentile(0.05);
  out.high = percentile(0.95);
  return out;
}

}  // namespace cohort::loop
