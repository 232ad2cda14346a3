// Ensemble metrics: how well each member, and the ensemble's mean prediction, classify a
// labelled table (typically `test`).
//
// The definitions are those of `cohort eval` (docs/models.md): accuracy of the argmax,
// NLL of the true class, Brier score summed over classes, and ECE over 15 equal-width
// confidence bins. Here they are computed from float32 probabilities (what `cohort predict`
// writes) rather than log-softmax outputs, so a probability that underflowed to exactly 0 is
// floored at kNllProbabilityFloor in the NLL. Otherwise a member's metrics agree with
// `cohort eval` up to float32 rounding of its probabilities (which can, rarely, move a sample
// across an ECE bin edge). docs/acquisition.md gives the formulas.
//
// Thread-safety: pure functions over caller-owned memory; concurrent calls are safe.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "loop/ensemble/view.h"

namespace cohort::loop {

// The smallest probability the NLL takes a log of: FLT_MIN, the smallest normal float32, so
// the floor only touches probabilities float32 cannot hold at full precision (it caps one
// sample's NLL at about 87.3 nats).
inline constexpr double kNllProbabilityFloor = 1.1754943508222875e-38;

// Number of equal-width confidence bins in the ECE: [0, 1/15), ..., [14/15, 1].
inline constexpr int kEceBins = 15;

// One confidence bin of the ECE: the samples whose top probability falls in it, their mean
// top probability and the fraction of them classified right (a reliability diagram's bar).
struct ReliabilityBin {
  double lower = 0, upper = 0;  // [lower, upper); the last bin includes 1
  int64_t count = 0;
  double confidence = 0;  // mean over the bin's samples; 0 when empty
  double accuracy = 0;    // fraction correct; 0 when empty
};

struct ClassificationMetrics {
  int64_t count = 0;    // samples; all metrics are 0 when there are none
  double accuracy = 0;  // fraction whose argmax (first maximum on ties) is the label
  double nll = 0;       // mean of -log max(p[label], kNllProbabilityFloor)
  double brier = 0;     // mean over samples of sum over classes of (p[c] - onehot[c])^2
  double ece = 0;       // sum over bins of |bin| / count * |accuracy(bin) - confidence(bin)|
  std::vector<ReliabilityBin> bins;  // the kEceBins bins the ECE sums over, lowest first

  // {"count", "accuracy", "nll", "brier", "ece"}: the keys `cohort eval --json` uses.
  std::map<std::string, double> ToMap() const;
};

struct EnsembleMetrics {
  std::vector<ClassificationMetrics> members;  // one per member, in member order
  ClassificationMetrics ensemble;              // of the mean probability over members
};

// Metrics of every member and of the ensemble mean against `labels` (one per sample, each in
// [0, classes)). Errors: invalid predictions (see ValidatePredictions), a label count that is
// not the sample count, a label out of range (the sample is named).
Result<EnsembleMetrics> ComputeEnsembleMetrics(const EnsemblePredictions& predictions,
                                               const std::vector<int64_t>& labels);

// What an ECE can tell apart on a table of a given size. Even a perfectly calibrated model
// reads an ECE above 0 on finitely many samples, and how far above depends on how many samples
// each confidence bin holds. This is the ECE such a model, with the confidences of
// `probabilities`, would read on a table of their size: each row counts as classified right
// with probability equal to its confidence (its top probability), independently, and `draws`
// such tables are scored. A measured ECE inside [low, high] is consistent with perfect
// calibration; two ECEs that both fall inside theirs are not told apart by the table.
struct EceRange {
  double mean = 0;  // over the draws
  double low = 0;   // 5% point (linear interpolation between draws, as numpy's percentile)
  double high = 0;  // 95% point
};

inline constexpr int kEceRangeDraws = 200;

// `probabilities`: rows of `classes` values (one model's, or an ensemble mean). Seeded: the same
// inputs and seed give the same range. Errors: classes < 1, a size that is not a multiple of
// `classes`, no rows, draws < 1.
Result<EceRange> PerfectlyCalibratedEce(std::span<const float> probabilities, int64_t classes,
                                        int draws = kEceRangeDraws, uint64_t seed = 0);

}  // namespace cohort::loop
