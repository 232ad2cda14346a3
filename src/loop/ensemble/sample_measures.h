// Per-sample measures of an ensemble's predictions: how uncertain it is about one sample, or how
// much its members disagree. They are the pointwise acquisition strategies' scores
// (loop/acquire/strategy.h names them) and the columns of `cohort predict`'s uncertainty
// (uncertainty.h), so a sample's numbers there are the ones the loop ranked it by.
// docs/acquisition.md gives every formula. Natural logarithms; 0 log 0 = 0. Every sum runs in
// member order in double, so a measure is reproducible bit for bit.
//
// Thread-safety: pure functions over caller-owned memory. Concurrent calls are safe.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "loop/ensemble/view.h"

namespace cohort::loop {

// -sum p log p over n values, with 0 log 0 = 0.
double Entropy(const double* p, int64_t n);

// One sample of a classification view as a measure sees it: its rows, the members' mean
// probability (summed in member order in double), and `classes` doubles of scratch.
struct ClassSample {
  const EnsemblePredictions& predictions;
  int64_t sample;
  const double* mean;
  double* scratch;
};
using SampleMeasure = double (*)(const ClassSample&);

double PredictiveEntropy(const ClassSample& s);  // H(mean)
double LeastConfidence(const ClassSample& s);    // 1 - max mean
double NegativeMargin(const ClassSample& s);     // second - first of the mean: small margins high
double MemberVariance(const ClassSample& s);     // members' variance (divide by M), class mean
double MutualInformation(const ClassSample& s);  // H(mean) - mean H(member) (BALD), >= 0
double VoteEntropy(const ClassSample& s);        // entropy of the members' argmax votes

// `measure` of every sample, after ValidatePredictions.
Result<std::vector<double>> MeasureSamples(SampleMeasure measure,
                                           const EnsemblePredictions& predictions);

// One sample of a regression view: per output component d, sd_d is the population standard
// deviation over members of their means and v_d the total predictive variance (the members'
// mean variance plus sd_d^2); these are their max and means over components.
struct RegressionSample {
  double max_sd = 0;
  double mean_sd = 0;
  double mean_total_variance = 0;
};
using RegressionMeasure = double (*)(const RegressionSample&);

double MaxDeviation(const RegressionSample& s);   // DP-GEN's model deviation, per component
double MeanDeviation(const RegressionSample& s);  // mean over components of sd_d
double TotalVariance(const RegressionSample& s);  // mean over components of v_d

// `measure` of every sample, after ValidateRegressionPredictions.
Result<std::vector<double>> MeasureRegressionSamples(RegressionMeasure measure,
                                                     const RegressionPredictions& predictions);

}  // namespace cohort::loop
