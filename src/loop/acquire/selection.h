// Selection: drawing a batch of k samples from one score per sample, higher meaning more useful
// to label: the top k (SelectTop), or a stochastic draw by score (SelectBatch), within an
// optional band of scores. Samples with exactly equal scores (compared in double) are ordered by
// a seeded pseudo-random key, so a selection depends only on the scores, the band and the seed,
// identically on every platform. docs/acquisition.md gives the formulas.
//
// Thread-safety: pure functions over caller-owned memory. Concurrent calls are safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace cohort::loop {

// The scores a selection may take: a sample is eligible when lower <= score < upper; an absent
// bound is open on that side. The default band admits every score. DP-GEN's trust levels are
// such a band: below `lower` the ensemble already agrees (labelling teaches it little), at or
// above `upper` the sample is likely garbage (an unphysical structure, a broken input).
struct ScoreBand {
  std::optional<double> lower;
  std::optional<double> upper;
};

// The indices of the (at most) k eligible samples with the highest scores, best first. Ties in
// score go to the smaller splitmix64 key drawn from `seed` in sample order over *all* samples
// (eligible or not), then to the smaller index; so a band only filters the unbanded order, and
// Acquire's selection is SelectTop of its scores. Fewer than k indices come back when fewer
// samples are eligible; that is not an error.
// Errors: k < 0, a NaN bound, lower > upper (lower == upper is an empty band, not an error), a
// NaN score (the sample is named; NaN has no place in the order).
Result<std::vector<int64_t>> SelectTop(const std::vector<double>& scores, int64_t k, uint64_t seed,
                                       const ScoreBand& band = {});

// How a batch is drawn from the scores. kTop: the k highest (SelectTop). The stochastic
// selections of Kirsch et al., "Stochastic Batch Acquisition" (TMLR 2023) draw k samples
// without replacement with probability proportional to
//   kPower:    score^(1/T)          (scores must be >= 0)
//   kSoftmax:  exp(score / T)
//   kSoftRank: rank^(-1/T)          (rank 1: the highest score, ties as SelectTop orders them)
// with T the temperature: as T falls they approach top-k, as it grows uniform sampling. A
// batch of the k top scores is often k near-copies of one hard region; drawing by score keeps
// the batch's preference for high scores while spreading it, at the cost of one sort.
struct BatchSelection {
  enum class Kind { kTop, kPower, kSoftmax, kSoftRank };
  Kind kind = Kind::kTop;
  double temperature = 1;  // > 0
};
// "top", "power", "softmax", "softrank": the names the config takes.
const std::vector<std::string>& BatchSelectionNames();
const char* BatchSelectionName(BatchSelection::Kind kind);

// The (at most) k eligible samples (the band, as SelectTop) drawn by `selection`, in the order
// drawn: the Gumbel-top-k trick, one Gumbel variate per sample (eligible or not) in sample
// order from `seed`, so a draw depends only on the scores, the band and the seed. kTop is
// SelectTop. Errors: those of SelectTop, a temperature that is not > 0 and finite, a negative
// score under kPower (the sample is named).
Result<std::vector<int64_t>> SelectBatch(const std::vector<double>& scores, int64_t k,
                                         uint64_t seed, const ScoreBand& band,
                                         const BatchSelection& selection);

}  // namespace cohort::loop
