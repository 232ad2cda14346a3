// Regression in the loop: metrics of every member and of the ensemble on a labelled table, and
// what the ensemble says about each sample (the mixture's mean and how its variance splits).
//
// The input is a RegressionPredictions view (loop/ensemble/view.h): each regression member's
// `cohort predict` output, float32 (n, 2, *target_shape) with the mean in [:, 0] and the
// variance in [:, 1], stacked in member order. A gaussian_nll member's variance is its own
// (> 0); an MSE member's is its training residual variance, constant per component. The pool
// scores (DP-GEN's model deviation) are loop/acquire/regression_scores.h. The metrics extend
// `cohort eval`'s RMSE and Gaussian NLL with MAE, the NLL of the ensemble's mixture and the
// coverage of central predictive intervals. docs/acquisition.md ("Regression") gives every
// formula.
//
// Thread-safety: pure functions over caller-owned memory; the view must stay valid (and
// unchanged) for the duration of a call. Concurrent calls are safe.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "loop/ensemble/view.h"

namespace cohort::loop {

// The smallest variance the NLL divides by. A variance of exactly 0 (an MSE member that fit
// its training set exactly, or a float32 underflow) would make the NLL infinite or NaN; floored,
// a target off the mean by e costs about e^2 / 2e-12 nats instead, still a very large number.
// It matches `cohort eval` whenever every variance is above it.
inline constexpr double kRegressionVarianceFloor = 1e-12;

// The nominal levels of the central predictive intervals whose coverage the metrics report.
inline constexpr std::array<double, 10> kCoverageLevels = {0.1, 0.2, 0.3, 0.4, 0.5,
                                                           0.6, 0.7, 0.8, 0.9, 0.95};

// The standard normal quantile: x with Phi(x) = p. -infinity at p = 0, +infinity at p = 1,
// NaN outside [0, 1]. Acklam's rational approximation (relative error below 1.15e-9), refined
// by one Halley step on std::erfc as Acklam recommends, which brings it close to double
// precision (the tests hold it to 1e-12 against reference quantiles).
double InverseNormalCdf(double p);

// The half-width, in standard deviations, of the central interval holding a fraction `level`
// of a Gaussian: sqrt(2) * erfinv(level) = InverseNormalCdf((1 + level) / 2). 1.959964 at 0.95.
double CentralIntervalZ(double level);

struct RegressionMetrics {
  int64_t count = 0;             // samples; all metrics are 0 when there are none
  double rmse = 0;               // sqrt of the mean over samples and components of (y - mu)^2
  double mae = 0;                // mean over samples and components of |y - mu|
  double nll = 0;                // Gaussian NLL per component; see ComputeRegressionMetrics
  double calibration_error = 0;  // mean over kCoverageLevels of |observed - nominal|
  // (nominal level, observed fraction of (sample, component) targets inside the central
  // interval of that level), one per kCoverageLevels entry, in that order.
  std::vector<std::pair<double, double>> coverage;

  // {"count", "rmse", "mae", "nll", "calibration_error", "coverage_90"}: coverage_90 is the
  // observed fraction at the 0.9 level. `cohort eval --json` reports count, rmse and nll with
  // the same meaning.
  std::map<std::string, double> ToMap() const;
};

struct EnsembleRegressionMetrics {
  std::vector<RegressionMetrics> members;  // one per member, in member order
  RegressionMetrics ensemble;              // of the ensemble; see ComputeRegressionMetrics
};

// Metrics of every member and of the ensemble against `targets` (samples * outputs values, C
// order: targets[i * outputs + d]).
//   member m: errors of its mean; NLL = mean over samples and components of
//     0.5 * (ln(2 pi v) + (y - mu)^2 / v), v = max(variance, kRegressionVarianceFloor)
//     (cohort eval's definition); coverage of N(mu, variance).
//   ensemble: errors of the mean of the members' means; NLL of the equal-weight mixture of the
//     members' diagonal Gaussians, -ln((1/M) sum_m prod_d N(y_d; mu_md, v_md)) per sample
//     (log-sum-exp, in double), divided by `outputs` so it is per component like a member's
//     and equal to it with one member; coverage of the moment-matched Gaussian, mean = mean of
//     the means, variance = mean of the variances + population variance of the means.
// Errors: invalid predictions (see ValidateRegressionPredictions), a target count that is not
// samples * outputs, a non-finite target (the sample and component are named).
Result<EnsembleRegressionMetrics> ComputeRegressionMetrics(const RegressionPredictions& predictions,
                                                           std::span<const float> targets);

// What an ensemble says about each sample's targets (`cohort predict RUN_DIR` on a regression
// run; docs/cli.md): per (sample, component), [i * outputs + d], the moments of the members'
// equal-weight mixture and how its variance splits. The aleatoric part is the noise the
// members themselves predict; the epistemic part is their disagreement, which more labels
// near the sample would shrink (Lakshminarayanan et al. 2017).
struct RegressionUncertainty {
  int64_t samples = 0, outputs = 0;
  std::vector<double> mean;       // mean over members of their means
  std::vector<double> aleatoric;  // mean over members of their variances
  std::vector<double> epistemic;  // population variance (divide by M) over members of their means
  std::vector<double> total;      // aleatoric + epistemic: the mixture's variance
};

// Validates the predictions (ValidateRegressionPredictions) and computes the above, summing in
// member order in double as ScoreRegression does: its `variance` score of a sample is the mean
// over components of `total`, its max_deviation the largest sqrt(epistemic).
Result<RegressionUncertainty> ComputeRegressionUncertainty(
    const RegressionPredictions& predictions);

}  // namespace cohort::loop
