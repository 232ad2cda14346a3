// Temperature scaling of an ensemble's mean prediction (Guo et al., "On Calibration of Modern
// Neural Networks", 2017): one scalar T > 0 that turns the mean probabilities p into
// softmax(log p / T), fitted to minimise the NLL on a labelled table the members did not train
// on. T > 1 softens an over-confident ensemble, T < 1 sharpens an under-confident one (the
// mean of calibrated members often is: averaging softens). The predicted class never changes,
// so accuracy does not either; NLL on the fitting table can only fall, and ECE usually does.
// `cohort predict --calibrate` uses it (docs/cli.md), and the loop fits one to each round's
// ensemble on the test table (CrossFitEnsembleTemperature).
//
// Thread-safety: pure functions over caller-owned memory; concurrent calls are safe.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "loop/ensemble/metrics.h"
#include "loop/ensemble/view.h"

namespace cohort::loop {

// The fitted temperature is searched in [kMinTemperature, kMaxTemperature]. On a table the
// ensemble classifies perfectly the NLL falls as T does, until it is 0 in double precision: the
// fit then returns a small T somewhere in that flat stretch.
inline constexpr double kMinTemperature = 0.01;
inline constexpr double kMaxTemperature = 100;

// Whether `temperature` is one ApplyTemperature takes: finite and > 0 (what the CLI options
// check before any work).
bool ValidTemperature(double temperature);

struct TemperatureFit {
  double temperature = 1;
  ClassificationMetrics before;  // the ensemble mean on the fitting table
  ClassificationMetrics after;   // softmax(log mean / temperature) on the same table
};

// softmax(log max(p, kNllProbabilityFloor) / temperature) for every row of `probabilities`
// (rows of `classes` values). Errors: a temperature that is not finite and > 0, a size that is
// not a multiple of `classes`.
Result<std::vector<float>> ApplyTemperature(std::span<const float> probabilities, int64_t classes,
                                            double temperature);

// The members' mean probabilities in float32 (samples x classes), as `cohort predict` writes
// them and ApplyTemperature reads them. `predictions` must be valid (ValidatePredictions).
std::vector<float> EnsembleMean(const EnsemblePredictions& predictions);

// Fits the temperature of the ensemble mean of `predictions` against `labels` (one per sample,
// in [0, classes)). Errors: those of ComputeEnsembleMetrics (invalid predictions, a label count
// that is not the sample count, a label out of range), no samples.
Result<TemperatureFit> FitEnsembleTemperature(const EnsemblePredictions& predictions,
                                              const std::vector<int64_t>& labels);

// The loop's calibration of a round's ensemble on its test table (docs/acquisition.md,
// "Calibration"): metrics of a temperature that never saw the rows it scores. The rows split by
// position into two halves (even, odd); each half is calibrated at the temperature fitted on the
// other, and the metrics are those of every row so calibrated. `temperature` is fitted on every
// row: the one to apply to new data (`cohort predict --calibrated`).
struct CrossFittedCalibration {
  double temperature = 1;
  std::array<double, 2> half_temperatures = {1, 1};  // fitted on the odd rows, applied to the
                                                     // even; and the other way round
  ClassificationMetrics raw;                         // the ensemble mean, uncalibrated
  ClassificationMetrics calibrated;                  // cross-fitted, as above
  // The cross-fitted rows that `calibrated` scores (samples x classes).
  std::vector<float> probabilities;
};

// Errors: those of FitEnsembleTemperature, fewer than 2 samples.
Result<CrossFittedCalibration> CrossFitEnsembleTemperature(const EnsemblePredictions& predictions,
                                                           const std::vector<int64_t>& labels);

}  // namespace cohort::loop
