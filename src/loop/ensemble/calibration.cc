#include "loop/ensemble/calibration.h"

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

// The temperature minimising ScaledNll over [kMinTemperature, kMaxTemperature], or 1 when no
// temperature does better: calibration never makes the fitting table worse.
double FitTemperature(const std::vector<double>& log_mean, const std::vector<int64_t>& labels,
                      int64_t classes) {
  // Golden-section search over u = log(beta), beta = 1 / T.
  const double ratio = (std::sqrt(5.0) - 1) / 2;
  double lo = -std::log(kMaxTemperature), hi = -std::log(kMinTemperature);
  double a = hi - ratio * (hi - lo), b = lo + ratio * (hi - lo);
  double fa = ScaledNll(log_mean, labels, classes, std::exp(a));
  double fb = ScaledNll(log_mean, labels, classes, std::exp(b));
  while (hi - lo > 1e-7) {
    if (fa <= fb) {
      hi = b;
      b = a;
      fb = fa;
      a = hi - ratio * (hi - lo);
      fa = ScaledNll(log_mean, labels, classes, std::exp(a));
    } else {
      lo = a;
      a = b;
      fa = fb;
      b = lo + ratio * (hi - lo);
      fb = ScaledNll(log_mean, labels, classes, std::exp(b));
    }
  }
  const double u = (lo + hi) / 2;
  if (ScaledNll(log_mean, labels, classes, 1.0) <=
      ScaledNll(log_mean, labels, classes, std::exp(u))) {
    return 1;
  }
  return std::exp(-u);
}

std::vector<double> LogOf(std::span<const float> mean) {
  std::vector<double> log_mean(mean.size());
  for (size_t j = 0; j < mean.size(); j++) {
    log_mean[j] = std::log(std::max<double>(mean[j], kNllProbabilityFloor));
  }
  return log_mean;
}

// Metrics of `probabilities` (rows of `classes`) as a one-member ensemble.
Result<ClassificationMetrics> MetricsOf(const std::vector<float>& probabilities, int64_t classes,
                                        const std::vector<int64_t>& labels) {
  COHORT_ASSIGN_OR_RETURN(
      EnsemblePredictions view,
      MakeEnsemblePredictions(probabilities, 1, static_cast<int64_t>(labels.size()), classes));
  COHORT_ASSIGN_OR_RETURN(EnsembleMetrics metrics, ComputeEnsembleMetrics(view, labels));
  return metrics.ensemble;
}

}  // namespace

std::vector<float> EnsembleMean(const EnsemblePredictions& p) {
  const int64_t C = p.classes;
  std::vector<float> mean(static_cast<size_t>(p.samples * C));
  const double inv_m = 1.0 / static_cast<double>(p.members);
  for (int64_t i = 0; i < p.samples; i++) {
    for (int64_t c = 0; c < C; c++) {
      double sum = 0;
      for (int64_t m = 0; m < p.members; m++) sum += p.row(m, i)[c];
      mean[i * C + c] = static_cast<float>(sum * inv_m);
    }
  }
  return mean;
}

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
  // The metrics before and after are those of a one-member view of the float32 mean.
  const std::vector<float> mean = EnsembleMean(p);
  TemperatureFit fit;
  COHORT_ASSIGN_OR_RETURN(fit.before, MetricsOf(mean, C, labels));
  fit.temperature = FitTemperature(LogOf(mean), labels, C);
  COHORT_ASSIGN_OR_RETURN(std::vector<float> calibrated,
                          ApplyTemperature(mean, C, fit.temperature));
  COHORT_ASSIGN_OR_RETURN(fit.after, MetricsOf(calibrated, C, labels));
  return fit;
}

Result<CrossFittedCalibration> CrossFitEnsembleTemperature(const EnsemblePredictions& predictions,
                                                           const std::vector<int64_t>& labels) {
  COHORT_RETURN_IF_ERROR(ValidatePredictions(predictions));
  const EnsemblePredictions& p = predictions;
  if (p.samples < 2) {
    return Status::InvalidArgument("a cross-fitted temperature needs at least 2 samples, got " +
                                   std::to_string(p.samples));
  }
  const int64_t C = p.classes;
  const auto row_size = static_cast<size_t>(C);
  const std::vector<float> mean = EnsembleMean(p);
  CrossFittedCalibration out;
  // First, as it checks the labels (their count, each in [0, C)) before any fit indexes by them.
  COHORT_ASSIGN_OR_RETURN(out.raw, MetricsOf(mean, C, labels));
  const std::vector<double> log_mean = LogOf(mean);
  out.temperature = FitTemperature(log_mean, labels, C);
  std::vector<float> calibrated(mean.size());
  for (int64_t half = 0; half < 2; half++) {
    // Fit on the other half's rows (those of the other parity), apply to this half's.
    std::vector<double> fit_log_rows;
    std::vector<int64_t> fit_labels;
    std::vector<float> own_rows;
    for (int64_t i = 0; i < p.samples; i++) {
      const size_t at = static_cast<size_t>(i) * row_size;
      if (i % 2 == half) {
        own_rows.insert(own_rows.end(), mean.begin() + at, mean.begin() + at + row_size);
      } else {
        fit_log_rows.insert(fit_log_rows.end(), log_mean.begin() + at,
                            log_mean.begin() + at + row_size);
        fit_labels.push_back(labels[static_cast<size_t>(i)]);
      }
    }
    const double temperature = FitTemperature(fit_log_rows, fit_labels, C);
    out.half_temperatures[static_cast<size_t>(half)] = temperature;
    COHORT_ASSIGN_OR_RETURN(std::vector<float> own, ApplyTemperature(own_rows, C, temperature));
    for (size_t j = 0; j * row_size < own.size(); j++) {
      const size_t i = 2 * j + static_cast<size_t>(half);
      std::copy_n(own.data() + j * row_size, row_size, calibrated.data() + i * row_size);
    }
  }
  COHORT_ASSIGN_OR_RETURN(out.calibrated, MetricsOf(calibrated, C, labels));
  out.probabilities = std::move(calibrated);
  return out;
}

}  // namespace cohort::loop
