// Pseudo-labelling (self-training): which unlabelled pool samples join the train table with the
// ensemble's own class, and which class.
//
// A sample qualifies when the ensemble's mean probability of its most probable class (its
// confidence) is at least `threshold`, and, with `agreement`, when every member's own most
// probable class is that class too. Qualifying samples are taken most confident first (ties by
// sample order), skipping a sample whose class already has `max_per_class`, until
// `max_per_round` are taken (a cap of 0 is no cap). The [[update]] step of kind `pseudo_label`
// (update_step.h) writes the picks as a change set: a move from the pool to train with these
// labels, checked and committed like any program's.
//
// Thread-safety: a pure function over caller-owned memory.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "loop/ensemble/view.h"

namespace cohort::loop {

struct PseudoLabelRule {
  double threshold = 1;
  bool agreement = false;
  int64_t max_per_round = 0;  // 0: no cap
  int64_t max_per_class = 0;  // 0: no cap
};

struct PseudoLabel {
  int64_t sample = 0;  // index into the predictions' samples
  int64_t label = 0;   // the ensemble's class
  double confidence = 0;
};

// The picks, most confident first. Samples whose `eligible` entry is false (when given, one
// per sample: those no longer in the pool) are passed over before the caps count. Errors:
// invalid predictions (ValidatePredictions), `eligible` of another length.
Result<std::vector<PseudoLabel>> SelectPseudoLabels(const EnsemblePredictions& predictions,
                                                    const PseudoLabelRule& rule,
                                                    const std::vector<bool>* eligible = nullptr);

}  // namespace cohort::loop
