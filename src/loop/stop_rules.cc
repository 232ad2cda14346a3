#include "loop/stop_rules.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace cohort::loop {

bool TargetReached(const TargetMetric& target, const std::map<std::string, double>& metrics) {
  // One the round did not compute (a regression metric in a classification run) is never
  // reached; the config check refuses such targets before a run starts.
  auto it = metrics.find(target.metric);
  if (it == metrics.end() || target.metric == "count" || std::isnan(it->second)) return false;
  return target.higher_is_better ? it->second >= target.value : it->second <= target.value;
}

bool KnownLastRound(const LoopConfig& config, const RoundState& s) {
  const StopConfig& stop = config.stop;
  if (stop.max_rounds && s.round + 1 >= *stop.max_rounds) return true;
  if (stop.label_budget && s.labels_used >= *stop.label_budget) return true;
  return s.pool_size == 0 && stop.stop_when_pool_exhausted;
}

std::optional<int64_t> RoundsLeftAfter(const LoopConfig& config, const RoundState& s) {
  const StopConfig& stop = config.stop;
  const int64_t k = std::max<int64_t>(1, config.acquisition.batch_size);
  std::optional<int64_t> left;
  auto bound = [&](int64_t rounds) {
    left = std::min(left.value_or(rounds), std::max<int64_t>(0, rounds));
  };
  if (stop.max_rounds) bound(*stop.max_rounds - s.round - 1);
  if (stop.label_budget) bound((*stop.label_budget - s.labels_used + k - 1) / k);
  if (stop.stop_when_pool_exhausted) bound((static_cast<int64_t>(s.pool_size) + k - 1) / k);
  return left;
}

StopDecision DecideAfterRound(const LoopConfig& config, const RoundState& s,
                              const std::map<std::string, double>& ensemble) {
  const StopConfig& stop = config.stop;
  StopDecision d;
  if (stop.target && TargetReached(*stop.target, ensemble)) {
    d.reason =
        fmt::format("the ensemble's test {} reached {}", stop.target->metric, stop.target->value);
  } else if (stop.max_rounds && s.round + 1 >= *stop.max_rounds) {
    d.reason = fmt::format("{} rounds done (stop.max_rounds)", s.round + 1);
  } else if (stop.label_budget && s.labels_used >= *stop.label_budget) {
    d.reason = fmt::format("the label budget of {} is spent", *stop.label_budget);
  } else if (s.pool_size == 0 && stop.stop_when_pool_exhausted) {
    d.reason = "the pool is exhausted";
  }
  d.k = config.acquisition.batch_size;
  if (stop.label_budget) d.k = std::min(d.k, *stop.label_budget - s.labels_used);
  d.k = std::max<int64_t>(0, std::min<int64_t>(d.k, static_cast<int64_t>(s.pool_size)));
  if (!d.stops() && d.k == 0 && !stop.max_rounds) {
    // Retraining on the same data forever helps nobody; max_rounds at least bounds it.
    d.reason = stop.target ? fmt::format(
                                 "nothing is left to acquire, and the ensemble's test {} "
                                 "did not reach {}",
                                 stop.target->metric, stop.target->value)
                           : "nothing is left to acquire";
  }
  if (d.stops()) d.k = 0;
  return d;
}

}  // namespace cohort::loop
