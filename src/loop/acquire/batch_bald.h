// BatchBALD (Kirsch, van Amersfoort, Gal, NeurIPS 2019) for a deep ensemble: pick a batch
// whose labels, taken jointly, tell the most about which member is right.
//
// BALD scores each sample alone, so its top k is often k copies of one confusing region:
// labelling the second copy teaches almost nothing once the first is known. BatchBALD picks
// greedily by the joint mutual information I(y_1..y_n; member), which counts that overlap.
// With the members as equally likely posterior samples, step n picks the candidate x that
// maximises
//   gain(x) = E_{y_B ~ p(y_B)} [ H( sum_m p(m | y_B) p_m(y_x) ) ] - mean_m H(p_m(y_x))
// where y_B are the labels of the batch picked so far and p(m | y_B) is each member's weight
// after seeing them. At n = 0 this is BALD; the sum of the gains is the batch's joint mutual
// information. The expectation runs over label configurations of the batch: enumerated
// exactly while there are at most `samples` of them (classes^n), then drawn (each
// configuration extends its own labels by a draw from p(y_x | y_B), so they stay samples of
// the joint), `samples` of them, weighted equally.
//
// Cost per greedy step: candidates x samples x members x classes multiply-adds and
// candidates x samples x classes logarithms. So the candidates are the `candidates` samples
// with the highest BALD scores (within the score band), and the cost grows with k times that;
// docs/acquisition.md gives measured times.
//
// Thread-safety: a pure function over caller-owned memory. Concurrent calls are safe.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "loop/acquire/selection.h"
#include "loop/ensemble/view.h"

namespace cohort::loop {

struct BatchBaldOptions {
  int64_t samples = 200;      // label configurations kept, >= 1
  int64_t candidates = 1000;  // top-BALD samples considered, >= 1
};

struct BatchBaldPicks {
  std::vector<int64_t> indices;  // sample indices, in the order picked
  std::vector<double> gains;     // each pick's gain(x) when picked (nats)
};

// The (at most) k samples BatchBALD picks, in order. Candidate order and ties follow SelectTop
// of the BALD scores with `seed` and `band`; label configurations are drawn from `seed` too, so
// the picks depend only on the predictions, k, the seed, the band and the options.
// Errors: those of ScoreSamples and SelectTop, options below 1, fewer than 2 members.
Result<BatchBaldPicks> SelectBatchBald(const EnsemblePredictions& predictions, int64_t k,
                                       uint64_t seed, const ScoreBand& band,
                                       const BatchBaldOptions& options);

}  // namespace cohort::loop
