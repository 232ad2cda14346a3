// Regression acquisition scores: how much the members disagree about each pool sample,
// following DP-GEN's "model deviation": a sample whose members' means spread widely is one the
// ensemble has not learned; SelectTop (loop/acquire/selection.h) picks the best of them,
// optionally within a band of trusted deviations. docs/acquisition.md ("Regression") gives
// every formula.
//
// Thread-safety: pure functions over caller-owned memory. Concurrent calls are safe.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "loop/ensemble/view.h"

namespace cohort::loop {

// One score per sample by a regression strategy of strategy.h (random, max_deviation,
// mean_deviation, variance), higher = more worth labelling; the measures are
// loop/ensemble/sample_measures.h's. With sd_d the population standard
// deviation (divide by M) over members of the means of component d:
//   max_deviation:  max_d sd_d (DP-GEN's model deviation, taken per component where DP-GEN
//                   takes each atom's force vector; docs/acquisition.md);
//   mean_deviation: (1/outputs) sum_d sd_d;
//   variance:       (1/outputs) sum_d ((1/M) sum_m v_md + sd_d^2), the total predictive
//                   variance (aleatoric + epistemic);
//   random:         0 for every sample.
// Sums run in member order in double, so a score is reproducible bit for bit. Validates the
// predictions first. Errors: an unknown strategy (the message lists the valid names), invalid
// predictions.
Result<std::vector<double>> ScoreRegression(const std::string& strategy,
                                            const RegressionPredictions& predictions);

}  // namespace cohort::loop
