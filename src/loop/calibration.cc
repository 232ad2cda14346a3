#include "loop/calibration.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace cohort::loop {
namespace {

// Mean over samples of -log softmax(beta * z)[label]: convex in the inverse temperature beta,
// so unimodal in log(beta) too, which the golden-section search below relies on.
double ScaledNll(const std::vector<double>& log_mean, const std::vector<int64_t>& labels,
                 int64_t classes, double beta) {
  double total = 0;
  const auto n = static_cast<int64_t>(labels.size());
  for (int64_t i = 0; i < n; i++) {
    const double* z = log_mean.data() + i * classes;
    const double top = *std::max_element(z, z + classes);
    double sum = 0;
    for (int64_t c = 0; c < classes; c++) sum += std::exp(beta * (z[c] - top));
    total += std::log(sum) - beta * (z[labels[i]] - top);
  }
  return total / static_cast<double>(n);
}

}  // namespace

bool ValidTemperature(double temperature) { return std::isfinite(temperature) && temperature > 0; }

Result<std::vector<float>> ApplyTemperature(std::span<const float> probabilities, int64_t classes,
                                            double temperature) {
  if (!ValidTemperature(temperature)) {
    return Status::InvalidArgument("temperature " + std::to_string(temperature) +
                                   " is not a finite number > 0");
  }
  if (classes <= 0 || probabilities.size() % static_cast<size_t>(classes) != 0) {
    return Status::InvalidArgument(std::to_string(probabilities.size()) +
                                   " probabilities are not rows of " + std::to_string(classes) +
                                   " classes");
  }
  const double beta = 1.0 / temperature;
  std::vector<float> out(probabilities.size());
  std::vector<double> z(static_cast<size_t>(classes));
  for (size_t at = 0; at < probabilities.size(); at += static_cast<size_t>(classes)) {
    for (int64_t c = 0; c < classes; c++) {
      z[c] = beta * std::log(std::max<double>(probabilities[at + c], kNllProbabilityFloor));
    }
    const double top = *std::max_element(z.begin(), z.end());
    double sum = 0;
    for (double& v : z) sum += (v = std::exp(v - top));
    for (int64_t c = 0; c < classes; c++) out[at + c] = static_cast<float>(z[c] / sum);
  }
  return out;
}

Result<TemperatureFit> FitEnsembleTemperature(const EnsemblePredictions& predictions,
                                              const std::vector<int64_t>& labels) {
  COHORT_RETURN_IF_ERROR(ValidatePredictions(predictions));
  const EnsemblePredictions& p = predictions;
  if (p.samples == 0) return Status::InvalidArgument("no samples to fit a temperature on");
  const int64_t C = p.classes;
  // The mean in float32, as `cohort predict` writes it and ApplyTemperature then reads it; the
  // metrics before and after are those of a one-member view of it.
  std::vector<float> mean(static_cast<size_t>(p.samples * C));
  const double inv_m = 1.0 / static_cast<double>(p.members);
  for (int64_t i = 0; i < p.samples; i++) {
    for (int64_t c = 0; c < C; c++) {
      double sum = 0;
      for (int64_t m = 0; m < p.members; m++) sum += p.row(m, i)[c];
      mean[i * C + c] = static_cast<float>(sum * inv_m);
    }
  }
  COHORT_ASSIGN_OR_RETURN(EnsemblePredictions mean_view,
                          MakeEnsemblePredictions(mean, 1, p.samples, C));
  COHORT_ASSIGN_OR_RETURN(EnsembleMetrics before, ComputeEnsembleMetrics(mean_view, labels));
  std::vector<double> log_mean(mean.size());
  for (size_t j = 0; j < mean.size(); j++) {
    log_mean[j] = std::log(std::max<double>(mean[j], kNllProbabilityFloor));
  }

  // Golden-section search over u = log(beta), beta = 1 / T.
  const double ratio = (std::sqrt(5.0) - 1) / 2;
  double lo = -std::log(kMaxTemperature), hi = -std::log(kMinTemperature);
  double a = hi - ratio * (hi - lo), b = lo + ratio * (hi - lo);
  double fa = ScaledNll(log_mean, labels, C, std::exp(a));
  double fb = ScaledNll(log_mean, labels, C, std::exp(b));
  while (hi - lo > 1e-7) {
    if (fa <= fb) {
      hi = b;
      b = a;
      fb = fa;
      a = hi - ratio * (hi - lo);
      fa = ScaledNll(log_mean, labels, C, std::exp(a));
    } else {
      lo = a;
      a = b;
      fa = fb;
      b = lo + ratio * (hi - lo);
      fb = ScaledNll(log_mean, labels, C, std::exp(b));
    }
  }
  const double u = (lo + hi) / 2;
  // T = 1 when no temperature does better: calibration never makes the fitting table worse.
  double temperature = std::exp(-u);
  if (ScaledNll(log_mean, labels, C, 1.0) <= ScaledNll(log_mean, labels, C, std::exp(u))) {
    temperature = 1;
  }

  COHORT_ASSIGN_OR_RETURN(std::vector<float> calibrated, ApplyTemperature(mean, C, temperature));
  COHORT_ASSIGN_OR_RETURN(EnsemblePredictions view,
                          MakeEnsemblePredictions(calibrated, 1, p.samples, C));
  COHORT_ASSIGN_OR_RETURN(EnsembleMetrics after, ComputeEnsembleMetrics(view, labels));
  TemperatureFit fit;
  fit.temperature = temperature;
  fit.before = before.ensemble;
  fit.after = after.ensemble;
  return fit;
}

}  // namespace cohort::loop
