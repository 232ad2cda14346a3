#include "loop/ensemble/regression.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <optional>

#include "loop/ensemble/view.h"

namespace cohort::loop {
namespace {

// 0.5 * (ln(2 pi v) + e^2 / v), v floored: one component's Gaussian NLL, written as
// `cohort eval` writes it.
double GaussianNll(double err, double variance) {
  const double v = std::max(variance, kRegressionVarianceFloor);
  return 0.5 * (std::log(2 * std::numbers::pi * v) + err * err / v);
}

// The half-widths (in standard deviations) of the kCoverageLevels intervals, computed once.
const std::array<double, kCoverageLevels.size()>& CoverageZ() {
  static const std::array<double, kCoverageLevels.size()> z = [] {
    std::array<double, kCoverageLevels.size()> out{};
    for (size_t l = 0; l < kCoverageLevels.size(); l++)
      out[l] = CentralIntervalZ(kCoverageLevels[l]);
    return out;
  }();
  return z;
}

// Sums the per-(sample, component) terms of the metrics of one predictor; Finish divides.
// The NLL is added by the caller (a member's is per component, the mixture's per sample).
class RegressionAccumulator {
 public:
  // One component: target y, predictive mean mu and variance v (>= 0, not floored: a zero
  // variance covers a target only when it equals the mean).
  void AddComponent(double y, double mu, double v) {
    const double err = y - mu;
    squared_error_ += err * err;
    absolute_error_ += std::abs(err);
    const double sd = std::sqrt(v);
    const std::array<double, kCoverageLevels.size()>& z = CoverageZ();
    for (size_t l = 0; l < z.size(); l++) {
      if (std::abs(err) <= z[l] * sd) inside_[l]++;
    }
  }
  void AddNll(double nll) { nll_ += nll; }

  RegressionMetrics Finish(int64_t samples, int64_t outputs) const {
    RegressionMetrics m;
    m.count = samples;
    for (double level : kCoverageLevels) m.coverage.emplace_back(level, 0.0);
    if (samples == 0) return m;
    const auto n = static_cast<double>(samples) * static_cast<double>(outputs);
    m.rmse = std::sqrt(squared_error_ / n);
    m.mae = absolute_error_ / n;
    m.nll = nll_ / n;
    for (size_t l = 0; l < kCoverageLevels.size(); l++) {
      m.coverage[l].second = static_cast<double>(inside_[l]) / n;
      m.calibration_error += std::abs(m.coverage[l].second - kCoverageLevels[l]);
    }
    m.calibration_error /= static_cast<double>(kCoverageLevels.size());
    return m;
  }

 private:
  double squared_error_ = 0;
  double absolute_error_ = 0;
  double nll_ = 0;
  std::array<int64_t, kCoverageLevels.size()> inside_{};
};

// The normal quantile for 0 < p <= 0.5: Acklam's rational approximation (relative error below
// 1.15e-9; one rational function in the centre, another in the lower tail), then one step of
// Halley's method on Phi(x) - p, Acklam's refinement, which brings it close to double
// precision. Only the lower half: there Phi(x) = erfc(-x / sqrt 2) / 2 is a small number that
// erfc gives to a few ulps, whereas near p = 1 the residual Phi(x) - p would be the
// difference of two numbers close to 1 and the step would add error instead of removing it.
double LowerNormalQuantile(double p) {
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,
                                 -2.759285104469687e+02, 1.383577518672690e+02,
                                 -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02,
                                 -1.556989798598866e+02, 6.680131188771972e+01,
                                 -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01,
                                 -2.400758277161838e+00, -2.549732539343734e+00,
                                 4.374664141464968e+00,  2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01,
                                 2.445134137142996e+00, 3.754408661907416e+00};
  constexpr double kTail = 0.02425;  // where Acklam switches to the tail function
  double x = 0;
  if (p < kTail) {
    const double q = std::sqrt(-2 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else {
    const double q = p - 0.5;
    const double r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  }
  const double e = 0.5 * std::erfc(-x / std::numbers::sqrt2) - p;
  const double u = e * std::sqrt(2 * std::numbers::pi) * std::exp(x * x / 2);
  return x - u / (1 + x * u / 2);
}

}  // namespace

double InverseNormalCdf(double p) {
  if (std::isnan(p) || p < 0 || p > 1) return std::numeric_limits<double>::quiet_NaN();
  if (p == 0) return -std::numeric_limits<double>::infinity();
  if (p == 1) return std::numeric_limits<double>::infinity();
  // By symmetry, from the lower half; 1 - p is exact for p in [0.5, 1] (Sterbenz).
  return p <= 0.5 ? LowerNormalQuantile(p) : -LowerNormalQuantile(1 - p);
}

double CentralIntervalZ(double level) { return InverseNormalCdf(0.5 + 0.5 * level); }

std::map<std::string, double> RegressionMetrics::ToMap() const {
  double coverage_90 = 0;
  for (const auto& [nominal, observed] : coverage) {
    if (nominal == 0.9) coverage_90 = observed;
  }
  return {{"count", static_cast<double>(count)},
          {"rmse", rmse},
          {"mae", mae},
          {"nll", nll},
          {"calibration_error", calibration_error},
          {"coverage_90", coverage_90}};
}

Result<EnsembleRegressionMetrics> ComputeRegressionMetrics(const RegressionPredictions& predictions,
                                                           std::span<const float> targets) {
  COHORT_RETURN_IF_ERROR(ValidateRegressionPredictions(predictions));
  const RegressionPredictions& p = predictions;
  const int64_t M = p.members;
  const int64_t D = p.outputs;
  if (static_cast<int64_t>(targets.size()) != p.samples * D) {
    return Status::InvalidArgument(std::to_string(targets.size()) + " targets for " +
                                   std::to_string(p.samples) + " samples of " + std::to_string(D) +
                                   " outputs (need " + std::to_string(p.samples * D) + ")");
  }
  for (int64_t i = 0; i < p.samples; i++) {
    for (int64_t d = 0; d < D; d++) {
      const float y = targets[static_cast<size_t>(i * D + d)];
      if (!std::isfinite(y)) {
        return Status::InvalidArgument("sample " + std::to_string(i) + " has target " +
                                       std::to_string(y) + " at component " + std::to_string(d));
      }
    }
  }

  const double inv_m = 1.0 / static_cast<double>(M);
  const double log_m = std::log(static_cast<double>(M));
  std::vector<RegressionAccumulator> members(static_cast<size_t>(M));
  RegressionAccumulator ensemble;
  // Per sample: every member's log-density of the whole target vector, for the mixture.
  std::vector<double> log_density(static_cast<size_t>(M));
  for (int64_t i = 0; i < p.samples; i++) {
    const float* y = targets.data() + i * D;
    std::fill(log_density.begin(), log_density.end(), 0.0);
    for (int64_t d = 0; d < D; d++) {
      // Moments over members, summed in member order in double.
      double mean_of_means = 0;
      double mean_of_variances = 0;
      for (int64_t m = 0; m < M; m++) {
        const double mu = p.mean(m, i)[d];
        const double v = p.variance(m, i)[d];
        const double nll = GaussianNll(y[d] - mu, v);
        members[m].AddComponent(y[d], mu, v);
        members[m].AddNll(nll);
        log_density[m] -= nll;
        mean_of_means += mu;
        mean_of_variances += v;
      }
      mean_of_means *= inv_m;
      mean_of_variances *= inv_m;
      double spread = 0;  // population variance of the means
      for (int64_t m = 0; m < M; m++) {
        const double dev = p.mean(m, i)[d] - mean_of_means;
        spread += dev * dev;
      }
      spread *= inv_m;
      ensemble.AddComponent(y[d], mean_of_means, mean_of_variances + spread);
    }
    // -ln((1/M) sum_m exp(l_m)) = -(max + ln sum_m exp(l_m - max) - ln M): the largest term
    // is exp(0) = 1, so the sum neither underflows to 0 nor overflows.
    const double top = *std::max_element(log_density.begin(), log_density.end());
    double sum = 0;
    for (double l : log_density) sum += std::exp(l - top);
    // Per component, so that Finish's division by samples * outputs gives the per-sample
    // mixture NLL divided by outputs, averaged over samples.
    ensemble.AddNll(-(top + std::log(sum) - log_m));
  }

  EnsembleRegressionMetrics out;
  for (const RegressionAccumulator& a : members) out.members.push_back(a.Finish(p.samples, D));
  out.ensemble = ensemble.Finish(p.samples, D);
  return out;
}

Result<RegressionUncertainty> ComputeRegressionUncertainty(
    const RegressionPredictions& predictions) {
  COHORT_RETURN_IF_ERROR(ValidateRegressionPredictions(predictions));
  const RegressionPredictions& p = predictions;
  const double inv_m = 1.0 / static_cast<double>(p.members);
  RegressionUncertainty u;
  u.samples = p.samples;
  u.outputs = p.outputs;
  const auto n = static_cast<size_t>(p.samples * p.outputs);
  u.mean.resize(n);
  u.aleatoric.resize(n);
  u.epistemic.resize(n);
  u.total.resize(n);
  for (int64_t i = 0; i < p.samples; i++) {
    for (int64_t d = 0; d < p.outputs; d++) {
      // Two passes, as in ScoreRegression: no cancellation when the means are large and close.
      double mean = 0;
      double aleatoric = 0;
      for (int64_t m = 0; m < p.members; m++) {
        mean += p.mean(m, i)[d];
        aleatoric += p.variance(m, i)[d];
      }
      mean *= inv_m;
      aleatoric *= inv_m;
      double spread = 0;
      for (int64_t m = 0; m < p.members; m++) {
        const double dev = p.mean(m, i)[d] - mean;
        spread += dev * dev;
      }
      spread *= inv_m;
      const auto k = static_cast<size_t>(i * p.outputs + d);
      u.mean[k] = mean;
      u.aleatoric[k] = aleatoric;
      u.epistemic[k] = spread;
      u.total[k] = aleatoric + spread;
    }
  }
  return u;
}

}  // namespace cohort::loop
