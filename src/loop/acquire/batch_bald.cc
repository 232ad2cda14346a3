#include "loop/acquire/batch_bald.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "common/splitmix.h"
#include "loop/ensemble/sample_measures.h"

namespace cohort::loop {
namespace {

// The label configurations of the batch so far: each one's weight and the members' posterior
// weights given its labels (rows of `members` values summing to 1).
struct Configurations {
  std::vector<double> weight;
  std::vector<double> posterior;
  int64_t size() const { return static_cast<int64_t>(weight.size()); }
};

// The candidates' probabilities, [j][m][c] in double, and each one's mean member entropy.
struct Candidates {
  int64_t members = 0, classes = 0;
  std::vector<double> probs;
  std::vector<double> member_entropy;
  const double* of(int64_t j) const { return &probs[static_cast<size_t>(j * members * classes)]; }
};

Candidates StageCandidates(const EnsemblePredictions& predictions,
                           const std::vector<int64_t>& indices) {
  Candidates out;
  out.members = predictions.members;
  out.classes = predictions.classes;
  const auto n = static_cast<int64_t>(indices.size());
  out.probs.resize(static_cast<size_t>(n * out.members * out.classes));
  out.member_entropy.resize(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; j++) {
    double* at = &out.probs[static_cast<size_t>(j * out.members * out.classes)];
    double h = 0;
    for (int64_t m = 0; m < out.members; m++) {
      const float* row = predictions.row(m, indices[static_cast<size_t>(j)]);
      std::copy(row, row + out.classes, at + m * out.classes);
      h += Entropy(at + m * out.classes, out.classes);
    }
    out.member_entropy[static_cast<size_t>(j)] = h / static_cast<double>(out.members);
  }
  return out;
}

// The predictive distribution of candidate j under configuration s: sum_m p(m|s) p_m(c).
void Predictive(const Candidates& cand, const Configurations& configs, int64_t j, int64_t s,
                double* out) {
  const int64_t classes = cand.classes;
  const double* p = cand.of(j);
  const double* post = &configs.posterior[static_cast<size_t>(s * cand.members)];
  std::fill(out, out + classes, 0.0);
  for (int64_t m = 0; m < cand.members; m++) {
    const double w = post[m];
    for (int64_t c = 0; c < classes; c++) out[c] += w * p[m * classes + c];
  }
  double total = 0;
  for (int64_t c = 0; c < classes; c++) total += out[c];
  if (total > 0) {
    for (int64_t c = 0; c < classes; c++) out[c] /= total;
  }
}

// The unpicked candidate of the highest gain given the configurations, and its gain; ties keep
// the earlier candidate (SelectTop order).
std::pair<int64_t, double> BestCandidate(const Candidates& cand, const Configurations& configs,
                                         const std::vector<char>& picked) {
  std::vector<double> q(static_cast<size_t>(cand.classes));
  int64_t best = -1;
  double best_gain = 0;
  for (int64_t j = 0; j < static_cast<int64_t>(picked.size()); j++) {
    if (picked[static_cast<size_t>(j)] != 0) continue;
    double joint = 0;
    for (int64_t s = 0; s < configs.size(); s++) {
      Predictive(cand, configs, j, s, q.data());
      joint += configs.weight[static_cast<size_t>(s)] * Entropy(q.data(), cand.classes);
    }
    const double gain = joint - cand.member_entropy[static_cast<size_t>(j)];
    if (best < 0 || gain > best_gain) {
      best = j;
      best_gain = gain;
    }
  }
  return {best, best_gain};
}

// Every configuration conditioned on candidate `pick`'s label: split exactly while there are
// at most `options.samples` of them, then drawn (the header says how).
Configurations Condition(const Candidates& cand, const Configurations& configs, int64_t pick,
                         const BatchBaldOptions& options, uint64_t* state) {
  const int64_t members = cand.members;
  const int64_t classes = cand.classes;
  const double* p = cand.of(pick);
  const int64_t count = configs.size();
  std::vector<double> predict(static_cast<size_t>(count * classes));
  for (int64_t s = 0; s < count; s++) {
    Predictive(cand, configs, pick, s, &predict[static_cast<size_t>(s * classes)]);
  }
  Configurations next;
  auto extend = [&](int64_t s, int64_t c, double weight) {
    const double* post = &configs.posterior[static_cast<size_t>(s * members)];
    double total = 0;
    const size_t at = next.posterior.size();
    for (int64_t m = 0; m < members; m++) {
      next.posterior.push_back(post[m] * p[m * classes + c]);
      total += next.posterior.back();
    }
    if (total > 0) {
      for (size_t i = at; i < next.posterior.size(); ++i) next.posterior[i] /= total;
    } else {  // a label no member gives any probability (rounding): nothing learnt
      std::copy(post, post + members, next.posterior.begin() + static_cast<std::ptrdiff_t>(at));
    }
    next.weight.push_back(weight);
  };
  if (count * classes <= options.samples) {
    // Exact: every configuration splits into one per label of the pick.
    for (int64_t s = 0; s < count; s++) {
      for (int64_t c = 0; c < classes; c++) {
        const double pc = predict[static_cast<size_t>(s * classes + c)];
        if (pc > 0) extend(s, c, configs.weight[static_cast<size_t>(s)] * pc);
      }
    }
  } else if (count < options.samples) {
    // From exact to sampled: `samples` configurations drawn from the split ones by systematic
    // resampling, each of weight 1 / samples.
    const double step_size = 1.0 / static_cast<double>(options.samples);
    double next_point = SplitMix64Unit(state) * step_size;
    double cumulative = 0;
    for (int64_t s = 0; s < count && next.size() < options.samples; s++) {
      for (int64_t c = 0; c < classes && next.size() < options.samples; c++) {
        const double pc = predict[static_cast<size_t>(s * classes + c)];
        if (pc <= 0) continue;
        cumulative += configs.weight[static_cast<size_t>(s)] * pc;
        while (next_point < cumulative && next.size() < options.samples) {
          extend(s, c, step_size);
          next_point += step_size;
        }
      }
    }
    // Rounding may leave the cumulative sum a hair below 1: renormalise what was drawn.
    const double total = static_cast<double>(next.size());
    for (double& w : next.weight) w = 1.0 / total;
  } else {
    // Sampled: each configuration draws the pick's label from p(y_x | its labels).
    for (int64_t s = 0; s < count; s++) {
      const double u = SplitMix64Unit(state);
      const double* pc = &predict[static_cast<size_t>(s * classes)];
      int64_t c = 0;
      double cumulative = pc[0];
      while (c + 1 < classes && (u >= cumulative || pc[c] <= 0)) cumulative += pc[++c];
      extend(s, c, configs.weight[static_cast<size_t>(s)]);
    }
  }
  return next;
}

}  // namespace

Result<BatchBaldPicks> SelectBatchBald(const EnsemblePredictions& predictions, int64_t k,
                                       uint64_t seed, const ScoreBand& band,
                                       const BatchBaldOptions& options) {
  if (options.samples < 1 || options.candidates < 1) {
    return Status::InvalidArgument("batchbald needs samples >= 1 and candidates >= 1, not " +
                                   std::to_string(options.samples) + " and " +
                                   std::to_string(options.candidates));
  }
  if (predictions.members < 2) {
    return Status::InvalidArgument("batchbald needs at least 2 members, not " +
                                   std::to_string(predictions.members));
  }
  COHORT_ASSIGN_OR_RETURN(std::vector<double> bald, MeasureSamples(MutualInformation, predictions));
  if (k < 0) return Status::InvalidArgument("cannot select " + std::to_string(k) + " samples");
  COHORT_ASSIGN_OR_RETURN(std::vector<int64_t> candidates,
                          SelectTop(bald, options.candidates, seed, band));
  const Candidates cand = StageCandidates(predictions, candidates);
  const auto n = static_cast<int64_t>(candidates.size());

  Configurations configs;
  configs.weight = {1.0};
  configs.posterior.assign(static_cast<size_t>(cand.members),
                           1.0 / static_cast<double>(cand.members));
  uint64_t state = seed ^ 0x8CB92BA72F3D8DD7ULL;
  std::vector<char> picked(static_cast<size_t>(n), 0);
  BatchBaldPicks out;
  const int64_t want = std::min(k, n);
  for (int64_t step = 0; step < want; step++) {
    const auto [best, best_gain] = BestCandidate(cand, configs, picked);
    picked[static_cast<size_t>(best)] = 1;
    out.indices.push_back(candidates[static_cast<size_t>(best)]);
    out.gains.push_back(std::max(0.0, best_gain));
    if (step + 1 == want) break;
    configs = Condition(cand, configs, best, options, &state);
  }
  return out;
}

}  // namespace cohort::loop
