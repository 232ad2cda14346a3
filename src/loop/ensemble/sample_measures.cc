#include "loop/ensemble/sample_measures.h"

#include <algorithm>
#include <cmath>

namespace cohort::loop {

double Entropy(const double* p, int64_t n) {
  double h = 0;
  for (int64_t c = 0; c < n; c++) {
    if (p[c] > 0) h -= p[c] * std::log(p[c]);
  }
  return h;
}

double PredictiveEntropy(const ClassSample& s) { return Entropy(s.mean, s.predictions.classes); }

double LeastConfidence(const ClassSample& s) {
  return 1.0 - *std::max_element(s.mean, s.mean + s.predictions.classes);
}

double NegativeMargin(const ClassSample& s) {
  double top1 = -1;
  double top2 = -1;
  for (int64_t c = 0; c < s.predictions.classes; c++) {
    const double v = s.mean[c];
    if (v > top1) {
      top2 = top1;
      top1 = v;
    } else if (v > top2) {
      top2 = v;
    }
  }
  return top2 - top1;
}

double MemberVariance(const ClassSample& s) {
  const EnsemblePredictions& p = s.predictions;
  const double inv_m = 1.0 / static_cast<double>(p.members);
  double total = 0;
  for (int64_t c = 0; c < p.classes; c++) {
    double ss = 0;
    for (int64_t m = 0; m < p.members; m++) {
      const double d = p.row(m, s.sample)[c] - s.mean[c];
      ss += d * d;
    }
    total += ss * inv_m;
  }
  return total / static_cast<double>(p.classes);
}

double MutualInformation(const ClassSample& s) {
  const EnsemblePredictions& p = s.predictions;
  double member_entropy = 0;
  for (int64_t m = 0; m < p.members; m++) {
    const float* row = p.row(m, s.sample);
    std::copy(row, row + p.classes, s.scratch);
    member_entropy += Entropy(s.scratch, p.classes);
  }
  // Non-negative by concavity of entropy; clamp away rounding noise.
  return std::max(
      0.0, Entropy(s.mean, p.classes) - member_entropy * (1.0 / static_cast<double>(p.members)));
}

double VoteEntropy(const ClassSample& s) {
  const EnsemblePredictions& p = s.predictions;
  std::fill(s.scratch, s.scratch + p.classes, 0.0);
  for (int64_t m = 0; m < p.members; m++) {
    const float* row = p.row(m, s.sample);
    s.scratch[std::max_element(row, row + p.classes) - row] += 1;  // first maximum wins
  }
  const double inv_m = 1.0 / static_cast<double>(p.members);
  for (int64_t c = 0; c < p.classes; c++) s.scratch[c] *= inv_m;
  return Entropy(s.scratch, p.classes);
}

Result<std::vector<double>> MeasureSamples(SampleMeasure measure,
                                           const EnsemblePredictions& predictions) {
  COHORT_RETURN_IF_ERROR(ValidatePredictions(predictions));
  const EnsemblePredictions& p = predictions;
  const double inv_m = 1.0 / static_cast<double>(p.members);
  std::vector<double> scores(static_cast<size_t>(p.samples), 0.0);
  std::vector<double> mean(static_cast<size_t>(p.classes));
  std::vector<double> scratch(static_cast<size_t>(p.classes));
  for (int64_t i = 0; i < p.samples; i++) {
    std::fill(mean.begin(), mean.end(), 0.0);
    for (int64_t m = 0; m < p.members; m++) {
      const float* row = p.row(m, i);
      for (int64_t c = 0; c < p.classes; c++) mean[c] += row[c];
    }
    for (double& v : mean) v *= inv_m;
    scores[static_cast<size_t>(i)] = measure({p, i, mean.data(), scratch.data()});
  }
  return scores;
}

double MaxDeviation(const RegressionSample& s) { return s.max_sd; }
double MeanDeviation(const RegressionSample& s) { return s.mean_sd; }
double TotalVariance(const RegressionSample& s) { return s.mean_total_variance; }

Result<std::vector<double>> MeasureRegressionSamples(RegressionMeasure measure,
                                                     const RegressionPredictions& predictions) {
  COHORT_RETURN_IF_ERROR(ValidateRegressionPredictions(predictions));
  const RegressionPredictions& p = predictions;
  const int64_t M = p.members;
  const int64_t D = p.outputs;
  const double inv_m = 1.0 / static_cast<double>(M);
  std::vector<double> scores(static_cast<size_t>(p.samples), 0.0);
  for (int64_t i = 0; i < p.samples; i++) {
    double max_sd = 0;
    double sum_sd = 0;
    double sum_total_variance = 0;
    for (int64_t d = 0; d < D; d++) {
      // Mean over members in member order, then the population variance about it (two passes:
      // no cancellation when the means are large and close together).
      double mean = 0;
      double mean_variance = 0;
      for (int64_t m = 0; m < M; m++) {
        mean += p.mean(m, i)[d];
        mean_variance += p.variance(m, i)[d];
      }
      mean *= inv_m;
      mean_variance *= inv_m;
      double spread = 0;
      for (int64_t m = 0; m < M; m++) {
        const double dev = p.mean(m, i)[d] - mean;
        spread += dev * dev;
      }
      spread *= inv_m;
      const double sd = std::sqrt(spread);
      max_sd = std::max(max_sd, sd);
      sum_sd += sd;
      sum_total_variance += mean_variance + spread;
    }
    scores[static_cast<size_t>(i)] = measure(
        {max_sd, sum_sd / static_cast<double>(D), sum_total_variance / static_cast<double>(D)});
  }
  return scores;
}

}  // namespace cohort::loop
