// What an ensemble says about each sample: the mean of its members' class probabilities, the
// class it predicts, and how uncertain it is (`cohort predict RUN_DIR`; docs/cli.md).
//
// The uncertainty measures are the acquisition strategies' scores (sample_measures.h; formulas
// in docs/acquisition.md), so a sample's numbers here are the ones the loop ranked it by:
// predictive entropy is `entropy`, mutual information is `bald`, member variance is
// `variance`. Vote agreement is the fraction of members whose own argmax is the ensemble's
// predicted class.
//
// Thread-safety: pure functions over caller-owned memory.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "loop/ensemble/view.h"

namespace cohort::loop {

struct EnsembleUncertainty {
  int64_t samples = 0, classes = 0;
  std::vector<float> mean;                 // [sample][class], the mean over members
  std::vector<int64_t> predicted;          // argmax of the mean (first maximum on ties)
  std::vector<double> entropy;             // H(mean), nats
  std::vector<double> mutual_information;  // H(mean) - mean over members of H(member), nats
  std::vector<double> variance;            // mean over classes of the members' variance
  std::vector<double> agreement;           // fraction of members whose argmax is `predicted`
};

// Validates the predictions (ValidatePredictions) and computes the above for every sample.
Result<EnsembleUncertainty> ComputeEnsembleUncertainty(const EnsemblePredictions& predictions);

}  // namespace cohort::loop
