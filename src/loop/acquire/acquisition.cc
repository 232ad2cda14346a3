#include "loop/acquire/acquisition.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/splitmix.h"
#include "loop/acquire/batch_bald.h"

namespace cohort::loop {
namespace {

enum class Strategy {
  kRandom,
  kEntropy,
  kMargin,
  kLeastConfident,
  kVariance,
  kBald,
  kVoteEntropy,
  kBatchBald,
};

struct NamedStrategy {
  const char* name;
  Strategy strategy;
  bool needs_several_members;
};

constexpr NamedStrategy kStrategies[] = {
    {"random", Strategy::kRandom, false},
    {"entropy", Strategy::kEntropy, false},
    {"margin", Strategy::kMargin, false},
    {"least_confident", Strategy::kLeastConfident, false},
    {"variance", Strategy::kVariance, true},
    {"bald", Strategy::kBald, true},
    {"vote_entropy", Strategy::kVoteEntropy, true},
    {"batchbald", Strategy::kBatchBald, true},
};

const NamedStrategy* FindStrategy(const std::string& name) {
  for (const NamedStrategy& s : kStrategies) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

Result<Strategy> ParseStrategy(const std::string& name) {
  if (const NamedStrategy* s = FindStrategy(name)) return s->strategy;
  std::string valid;
  for (const NamedStrategy& s : kStrategies) {
    if (!valid.empty()) valid += ", ";
    valid += s.name;
  }
  return Status::InvalidArgument("unknown acquisition strategy '" + name + "' (valid: " + valid +
                                 ")");
}

// -sum p log p over n values, with 0 log 0 = 0.
double Entropy(const double* p, int64_t n) {
  double h = 0;
  for (int64_t c = 0; c < n; c++) {
    if (p[c] > 0) h -= p[c] * std::log(p[c]);
  }
  return h;
}

}  // namespace

const std::vector<std::string>& AcquisitionStrategies() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const NamedStrategy& s : kStrategies) v.emplace_back(s.name);
    return v;
  }();
  return names;
}

bool StrategyNeedsSeveralMembers(const std::string& strategy) {
  const NamedStrategy* s = FindStrategy(strategy);
  return s != nullptr && s->needs_several_members;
}

Result<std::vector<double>> ScoreSamples(const std::string& strategy,
                                         const EnsemblePredictions& predictions) {
  COHORT_ASSIGN_OR_RETURN(Strategy which, ParseStrategy(strategy));
  COHORT_RETURN_IF_ERROR(ValidatePredictions(predictions));
  const EnsemblePredictions& p = predictions;
  const int64_t M = p.members;
  const int64_t C = p.classes;
  const double inv_m = 1.0 / static_cast<double>(M);
  std::vector<double> scores(static_cast<size_t>(p.samples), 0.0);
  if (which == Strategy::kRandom) return scores;

  std::vector<double> mean(static_cast<size_t>(C));
  std::vector<double> member(static_cast<size_t>(C));
  std::vector<int64_t> votes(static_cast<size_t>(C));
  for (int64_t i = 0; i < p.samples; i++) {
    // Mean probability, summed in member order in double so the result is reproducible.
    std::fill(mean.begin(), mean.end(), 0.0);
    for (int64_t m = 0; m < M; m++) {
      const float* row = p.row(m, i);
      for (int64_t c = 0; c < C; c++) mean[c] += row[c];
    }
    for (int64_t c = 0; c < C; c++) mean[c] *= inv_m;

    double score = 0;
    switch (which) {
      case Strategy::kRandom:
        break;
      case Strategy::kEntropy:
        score = Entropy(mean.data(), C);
        break;
      case Strategy::kLeastConfident:
        score = 1.0 - *std::max_element(mean.begin(), mean.end());
        break;
      case Strategy::kMargin: {
        double top1 = -1;
        double top2 = -1;
        for (double v : mean) {
          if (v > top1) {
            top2 = top1;
            top1 = v;
          } else if (v > top2) {
            top2 = v;
          }
        }
        score = top2 - top1;  // -(margin): a smaller margin scores higher
        break;
      }
      case Strategy::kVariance: {
        // Population variance across members (divide by M), averaged over classes.
        double total = 0;
        for (int64_t c = 0; c < C; c++) {
          double ss = 0;
          for (int64_t m = 0; m < M; m++) {
            const double d = p.row(m, i)[c] - mean[c];
            ss += d * d;
          }
          total += ss * inv_m;
        }
        score = total / static_cast<double>(C);
        break;
      }
      case Strategy::kBald:
      case Strategy::kBatchBald: {  // its batch comes from SelectBatchBald; a sample's score is
                                    // BALD
        double member_entropy = 0;
        for (int64_t m = 0; m < M; m++) {
          const float* row = p.row(m, i);
          for (int64_t c = 0; c < C; c++) member[c] = row[c];
          member_entropy += Entropy(member.data(), C);
        }
        // Non-negative by concavity of entropy; clamp away rounding noise.
        score = std::max(0.0, Entropy(mean.data(), C) - member_entropy * inv_m);
        break;
      }
      case Strategy::kVoteEntropy: {
        std::fill(votes.begin(), votes.end(), 0);
        for (int64_t m = 0; m < M; m++) {
          const float* row = p.row(m, i);
          votes[std::max_element(row, row + C) - row]++;  // first maximum wins
        }
        for (int64_t c = 0; c < C; c++) member[c] = static_cast<double>(votes[c]) * inv_m;
        score = Entropy(member.data(), C);
        break;
      }
    }
    scores[i] = score;
  }
  return scores;
}

Result<std::vector<int64_t>> SelectTop(const std::vector<double>& scores, int64_t k, uint64_t seed,
                                       const ScoreBand& band) {
  if (k < 0) return Status::InvalidArgument("cannot select " + std::to_string(k) + " samples");
  for (const std::optional<double>& bound : {band.lower, band.upper}) {
    if (bound.has_value() && std::isnan(*bound)) {
      return Status::InvalidArgument("score band has a NaN bound");
    }
  }
  if (band.lower.has_value() && band.upper.has_value() && *band.lower > *band.upper) {
    return Status::InvalidArgument("score band lower bound " + std::to_string(*band.lower) +
                                   " is above its upper bound " + std::to_string(*band.upper));
  }
  const auto n = static_cast<int64_t>(scores.size());
  // NaN is unordered: it would break the strict weak order nth_element and sort rely on.
  for (int64_t i = 0; i < n; i++) {
    if (std::isnan(scores[i])) {
      return Status::InvalidArgument("sample " + std::to_string(i) + " has a NaN score");
    }
  }

  // One pseudo-random key per sample, in sample order; ties in score go to the smaller key,
  // and (practically never) equal keys to the smaller index. The order is total, so the
  // selection and its order do not depend on how nth_element or sort are implemented. Every
  // sample draws its key, eligible or not, so a band never changes how ties fall.
  std::vector<uint64_t> keys(static_cast<size_t>(n));
  uint64_t state = seed;
  for (uint64_t& key : keys) key = SplitMix64(&state);
  auto better = [&](int64_t a, int64_t b) {
    if (scores[a] != scores[b]) return scores[a] > scores[b];
    if (keys[a] != keys[b]) return keys[a] < keys[b];
    return a < b;
  };
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) {
    const bool above_lower = !band.lower.has_value() || scores[i] >= *band.lower;
    const bool below_upper = !band.upper.has_value() || scores[i] < *band.upper;
    if (above_lower && below_upper) order.push_back(i);
  }
  const int64_t take = std::min(k, static_cast<int64_t>(order.size()));
  if (take < static_cast<int64_t>(order.size())) {
    std::nth_element(order.begin(), order.begin() + take, order.end(), better);
  }
  std::sort(order.begin(), order.begin() + take, better);
  order.resize(static_cast<size_t>(take));
  return order;
}

const std::vector<std::string>& BatchSelectionNames() {
  static const std::vector<std::string> names = {"top", "power", "softmax", "softrank"};
  return names;
}

const char* BatchSelectionName(BatchSelection::Kind kind) {
  switch (kind) {
    case BatchSelection::Kind::kPower:
      return "power";
    case BatchSelection::Kind::kSoftmax:
      return "softmax";
    case BatchSelection::Kind::kSoftRank:
      return "softrank";
    case BatchSelection::Kind::kTop:
      break;
  }
  return "top";
}

Result<std::vector<int64_t>> SelectBatch(const std::vector<double>& scores, int64_t k,
                                         uint64_t seed, const ScoreBand& band,
                                         const BatchSelection& selection) {
  if (selection.kind == BatchSelection::Kind::kTop) return SelectTop(scores, k, seed, band);
  const double t = selection.temperature;
  if (!(t > 0) || !std::isfinite(t)) {
    return Status::InvalidArgument("batch selection temperature must be > 0 and finite, not " +
                                   std::to_string(t));
  }
  const auto n = static_cast<int64_t>(scores.size());
  // Every eligible sample, best first: the band's filter, and the ranks kSoftRank needs.
  COHORT_ASSIGN_OR_RETURN(std::vector<int64_t> ranked, SelectTop(scores, n, seed, band));
  if (k < 0) return Status::InvalidArgument("cannot select " + std::to_string(k) + " samples");
  // Gumbel variates from a stream of their own, so the tie keys of SelectTop stay as they were.
  std::vector<double> gumbel(static_cast<size_t>(n));
  uint64_t state = seed ^ 0xD1B54A32D192ED03ULL;
  for (double& g : gumbel) {
    const double u = (static_cast<double>(SplitMix64(&state) >> 11) + 0.5) * 0x1.0p-53;  // (0, 1)
    g = -std::log(-std::log(u));
  }
  std::vector<std::pair<double, int64_t>> keyed;
  keyed.reserve(ranked.size());
  for (size_t r = 0; r < ranked.size(); ++r) {
    const int64_t i = ranked[r];
    const double s = scores[static_cast<size_t>(i)];
    double log_weight = 0;
    switch (selection.kind) {
      case BatchSelection::Kind::kPower:
        if (s < 0) {
          return Status::InvalidArgument("power selection needs scores >= 0, and sample " +
                                         std::to_string(i) + " scores " + std::to_string(s));
        }
        // A zero score gets a weight far below any positive one, yet all-zero scores (random)
        // still draw uniformly.
        log_weight = std::log(std::max(s, 1e-300)) / t;
        break;
      case BatchSelection::Kind::kSoftmax:
        log_weight = s / t;
        break;
      case BatchSelection::Kind::kSoftRank:
        log_weight = -std::log(static_cast<double>(r + 1)) / t;
        break;
      case BatchSelection::Kind::kTop:
        break;
    }
    keyed.emplace_back(log_weight + gumbel[static_cast<size_t>(i)], i);
  }
  const auto take = static_cast<size_t>(std::min<int64_t>(k, static_cast<int64_t>(keyed.size())));
  auto better = [](const std::pair<double, int64_t>& a, const std::pair<double, int64_t>& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  std::partial_sort(keyed.begin(), keyed.begin() + static_cast<std::ptrdiff_t>(take), keyed.end(),
                    better);
  std::vector<int64_t> picks;
  picks.reserve(take);
  for (size_t j = 0; j < take; ++j) picks.push_back(keyed[j].second);
  return picks;
}

Result<std::vector<int64_t>> Acquire(const std::string& strategy,
                                     const EnsemblePredictions& predictions, int64_t k,
                                     uint64_t seed, std::vector<double>* scores_out) {
  COHORT_RETURN_IF_ERROR(ParseStrategy(strategy).status());
  if (k < 0) return Status::InvalidArgument("cannot acquire " + std::to_string(k) + " samples");
  if (k > predictions.samples) {
    return Status::InvalidArgument("cannot acquire " + std::to_string(k) +
                                   " samples from a pool of " +
                                   std::to_string(predictions.samples));
  }
  COHORT_ASSIGN_OR_RETURN(std::vector<double> scores, ScoreSamples(strategy, predictions));
  std::vector<int64_t> order;
  if (strategy == "batchbald") {
    COHORT_ASSIGN_OR_RETURN(BatchBaldPicks picks,
                            SelectBatchBald(predictions, k, seed, {}, BatchBaldOptions{}));
    order = std::move(picks.indices);
  } else {
    COHORT_ASSIGN_OR_RETURN(order, SelectTop(scores, k, seed));
  }
  if (scores_out != nullptr) *scores_out = std::move(scores);
  return order;
}

}  // namespace cohort::loop
