#include "loop/acquire/selection.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "common/splitmix.h"

namespace cohort::loop {

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

}  // namespace cohort::loop
