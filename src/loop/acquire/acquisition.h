// Acquisition by strategy name over predictions in memory: every sample's score and the k
// samples most worth labelling, best first. The loop's acquire step reads the members' files
// instead (pool_picks.h); these are the same scores and picks for a pool that fits in memory,
// and what the tests and benchmarks call.
//
// The input is a read-only view of the members' class probabilities for the pool, laid out
// [member][sample][class] in C order (each member's `cohort predict` output, float32
// (n, classes), stacked). The strategies are strategy.h's classification records;
// docs/acquisition.md gives every formula.
//
// Thread-safety: pure functions over caller-owned memory; the view must stay valid (and
// unchanged) for the duration of a call. Concurrent calls are safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "loop/acquire/selection.h"
#include "loop/acquire/strategy.h"
#include "loop/ensemble/view.h"

namespace cohort::loop {

// One score per sample by a classification strategy, higher = more useful to label (all
// zeros for `random`; BALD for `batchbald`, whose batch is joint). Validates the predictions
// first. Errors: an unknown strategy (the message lists the valid names), invalid predictions.
Result<std::vector<double>> ScoreSamples(const std::string& strategy,
                                         const EnsemblePredictions& predictions);

// The k most useful distinct sample indices, most useful first, by `strategy`. Ties in score
// are broken by a pseudo-random key per sample drawn from `seed` (splitmix64), so `random`
// (all scores equal) is a seeded uniform sample without replacement in random order. If
// scores_out is set it receives every sample's score (size `samples`).
// Errors: unknown strategy (the message lists the valid names), k < 0 or k > samples (both
// numbers named), invalid predictions (see ValidatePredictions).
Result<std::vector<int64_t>> Acquire(const std::string& strategy,
                                     const EnsemblePredictions& predictions, int64_t k,
                                     uint64_t seed, std::vector<double>* scores_out = nullptr);

}  // namespace cohort::loop
