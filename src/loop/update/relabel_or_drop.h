// Curation: which train samples carry a label the ensemble confidently contradicts.
//
// A train sample is a suspect when the ensemble's mean probability of its stored class is below
// `threshold`. Suspects are taken least probable first (ties by sample order) until
// `max_per_round` are taken (0: no cap). The [[update]] step of kind `relabel_or_drop`
// (update_step.h) writes them as a change set: removed from train (action "drop"), or asked of
// the run's command oracle and relabelled where its answer differs (action "relabel"); checked
// and committed like any program's change set.
//
// The members judge samples they trained on, so a sample's own label pulls its prediction
// towards it; a threshold well below 1/2 finds labels the members could not fit despite that.
//
// Thread-safety: a pure function over caller-owned memory.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "loop/ensemble/view.h"

namespace cohort::loop {

struct SuspectRule {
  double threshold = 0;
  int64_t max_per_round = 0;  // 0: no cap
};

struct SuspectLabel {
  int64_t sample = 0;      // index into the predictions' samples
  int64_t label = 0;       // the stored class
  double probability = 0;  // the ensemble's mean probability of it
  int64_t predicted = 0;   // the ensemble's most probable class
};

// The suspects, least probable first. `labels` holds each sample's stored class; samples whose
// `eligible` entry is false (when given: no longer in the train table) are passed over.
// Errors: invalid predictions (ValidatePredictions), `labels` or `eligible` of another length, a
// label outside [0, classes).
Result<std::vector<SuspectLabel>> SelectSuspectLabels(const EnsemblePredictions& predictions,
                                                      std::span<const int64_t> labels,
                                                      const SuspectRule& rule,
                                                      const std::vector<bool>* eligible = nullptr);

}  // namespace cohort::loop
