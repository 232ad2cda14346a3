#include "loop/ensemble/uncertainty.h"

#include <algorithm>

#include "loop/ensemble/sample_measures.h"

namespace cohort::loop {

Result<EnsembleUncertainty> ComputeEnsembleUncertainty(const EnsemblePredictions& p) {
  EnsembleUncertainty out;
  out.samples = p.samples;
  out.classes = p.classes;
  COHORT_ASSIGN_OR_RETURN(out.entropy, MeasureSamples(PredictiveEntropy, p));
  COHORT_ASSIGN_OR_RETURN(out.mutual_information, MeasureSamples(MutualInformation, p));
  COHORT_ASSIGN_OR_RETURN(out.variance, MeasureSamples(MemberVariance, p));
  const int64_t C = p.classes;
  out.mean.assign(static_cast<size_t>(p.samples * C), 0.0f);
  out.predicted.resize(static_cast<size_t>(p.samples));
  out.agreement.resize(static_cast<size_t>(p.samples));
  std::vector<double> mean(static_cast<size_t>(C));
  std::vector<int64_t> votes(static_cast<size_t>(p.members));
  for (int64_t i = 0; i < p.samples; i++) {
    std::fill(mean.begin(), mean.end(), 0.0);
    for (int64_t m = 0; m < p.members; m++) {
      const float* r = p.row(m, i);
      for (int64_t c = 0; c < C; c++) mean[c] += r[c];
      votes[m] = std::max_element(r, r + C) - r;
    }
    for (int64_t c = 0; c < C; c++) {
      mean[c] /= static_cast<double>(p.members);
      out.mean[static_cast<size_t>(i * C + c)] = static_cast<float>(mean[c]);
    }
    const int64_t predicted = std::max_element(mean.begin(), mean.end()) - mean.begin();
    out.predicted[i] = predicted;
    out.agreement[i] = static_cast<double>(std::count(votes.begin(), votes.end(), predicted)) /
                       static_cast<double>(p.members);
  }
  return out;
}

}  // namespace cohort::loop
