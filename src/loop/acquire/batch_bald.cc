#include "loop/acquire/batch_bald.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/splitmix.h"

namespace cohort::loop {
namespace {

double Entropy(const double* p, int64_t n) {
  double h = 0;
  for (int64_t c = 0; c < n; c++) {
    if (p[c] > 0) h -= p[c] * std::log(p[c]);
  }
  return h;
}

// The label configurations of the batch so far: each one's weight and the members' posterior
// weights given its labels (rows of `members` values summing to 1).
struct Configurations {
  std::vector<double> weight;
  std::vector<double> posterior;
  int64_t size() const { return static_cast<int64_t>(weight.size()); }
};

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
  COHORT_ASSIGN_OR_RETURN(std::vector<double> bald, ScoreSamples("bald", predictions));
  if (k < 0) return Status::InvalidArgument("cannot select " + std::to_string(k) + " samples");
  COHORT_ASSIGN_OR_RETURN(std::vector<int64_t> candidates,
                          SelectTop(bald, options.candidates, seed, band));
  const int64_t members = predictions.members;
  const int64_t classes = predictions.classes;
  const auto n = static_cast<int64_t>(candidates.size());

  // Candidate j's probabilities, [j][m][c] in double, and its mean member entropy.
  std::vector<double> probs(static_cast<size_t>(n * members * classes));
  std::vector<double> member_entropy(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; j++) {
    double* out = &probs[static_cast<size_t>(j * members * classes)];
    double h = 0;
    for (int64_t m = 0; m < members; m++) {
      const float* row = predictions.row(m, candidates[static_cast<size_t>(j)]);
      std::copy(row, row + classes, out + m * classes);
      h += Entropy(out + m * classes, classes);
    }
    member_entropy[static_cast<size_t>(j)] = h / static_cast<double>(members);
  }

  Configurations configs;
  configs.weight = {1.0};
  configs.posterior.assign(static_cast<size_t>(members), 1.0 / static_cast<double>(members));
  // The predictive distribution of candidate j under configuration s: sum_m p(m|s) p_m(c).
  std::vector<double> q(static_cast<size_t>(classes));
  auto predictive = [&](int64_t j, int64_t s, double* out) {
    const double* p = &probs[static_cast<size_t>(j * members * classes)];
    const double* post = &configs.posterior[static_cast<size_t>(s * members)];
    std::fill(out, out + classes, 0.0);
    for (int64_t m = 0; m < members; m++) {
      const double w = post[m];
      for (int64_t c = 0; c < classes; c++) out[c] += w * p[m * classes + c];
    }
    double total = 0;
    for (int64_t c = 0; c < classes; c++) total += out[c];
    if (total > 0) {
      for (int64_t c = 0; c < classes; c++) out[c] /= total;
    }
  };

  uint64_t state = seed ^ 0x8CB92BA72F3D8DD7ULL;
  std::vector<char> picked(static_cast<size_t>(n), 0);
  BatchBaldPicks out;
  const int64_t want = std::min(k, n);
  for (int64_t step = 0; step < want; step++) {
    int64_t best = -1;
    double best_gain = 0;
    for (int64_t j = 0; j < n; j++) {
      if (picked[static_cast<size_t>(j)] != 0) continue;
      double joint = 0;
      for (int64_t s = 0; s < configs.size(); s++) {
        predictive(j, s, q.data());
        joint += configs.weight[static_cast<size_t>(s)] * Entropy(q.data(), classes);
      }
      const double gain = joint - member_entropy[static_cast<size_t>(j)];
      if (best < 0 || gain > best_gain) {  // ties keep the earlier candidate (SelectTop order)
        best = j;
        best_gain = gain;
      }
    }
    picked[static_cast<size_t>(best)] = 1;
    out.indices.push_back(candidates[static_cast<size_t>(best)]);
    out.gains.push_back(std::max(0.0, best_gain));
    if (step + 1 == want) break;

    // Condition every configuration on the new pick's label.
    const double* p = &probs[static_cast<size_t>(best * members * classes)];
    const int64_t count = configs.size();
    std::vector<double> predict(static_cast<size_t>(count * classes));
    for (int64_t s = 0; s < count; s++)
      predictive(best, s, &predict[static_cast<size_t>(s * classes)]);
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
      double next_point = SplitMix64Unit(&state) * step_size;
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
        const double u = SplitMix64Unit(&state);
        const double* pc = &predict[static_cast<size_t>(s * classes)];
        int64_t c = 0;
        double cumulative = pc[0];
        while (c + 1 < classes && (u >= cumulative || pc[c] <= 0)) cumulative += pc[++c];
        extend(s, c, configs.weight[static_cast<size_t>(s)]);
      }
    }
    configs = std::move(next);
  }
  return out;
}

}  // namespace cohort::loop
