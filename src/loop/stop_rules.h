// Stop rules: whether a round is the run's last, and how many samples it acquires if not.
//
// After round r trains, the rules are checked in this order: the ensemble reached the target,
// r + 1 rounds are done (max_rounds), the label budget is spent, the pool is exhausted (when
// stop_when_pool_exhausted). A round that goes on acquires k = min(batch_size, budget left,
// pool size). When k is 0 and no max_rounds bounds the run, nothing can change the data any
// more and retraining the same generation would go on forever: the run stops, saying so.
// docs/config.md ("Stop rules") describes them for users.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "loop/config/config.h"

namespace cohort::loop {

// Where a run stands after a round trained.
struct RoundState {
  int64_t round = 0;
  int64_t labels_used = 0;  // labels the run acquired so far (train rows beyond the first)
  uint64_t pool_size = 0;
};

struct StopDecision {
  std::string reason;  // why the run stops here; empty: it goes on
  int64_t k = 0;       // samples to acquire when it goes on (0: it retrains as it is)
  bool stops() const { return !reason.empty(); }
};

// How many rounds the stop rules allow after round `s.round` at most: the fewer of what
// max_rounds, the label budget and the pool (each round after this one acquires k first) leave;
// nullopt when only a target metric or nothing bounds the run.
std::optional<int64_t> RoundsLeftAfter(const LoopConfig& config, const RoundState& s);

// The decision after a round whose ensemble scored `ensemble` on the test table: its metrics
// by name (ClassificationMetrics::ToMap, or RegressionMetrics::ToMap in a regression run).
StopDecision DecideAfterRound(const LoopConfig& config, const RoundState& state,
                              const std::map<std::string, double>& ensemble);

// Whether the round is known to be the last before it trains (max_rounds, a spent budget, an
// exhausted pool): its members then need not predict the pool.
bool KnownLastRound(const LoopConfig& config, const RoundState& state);

// Whether `metrics` meets the target (a metric the round did not compute never does).
bool TargetReached(const TargetMetric& target, const std::map<std::string, double>& metrics);

}  // namespace cohort::loop
