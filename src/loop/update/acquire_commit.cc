#include "loop/update/acquire_commit.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <utility>

#include "common/row_sample.h"
#include "common/worker_protocol.h"
#include "loop/acquire/pool_picks.h"
#include "loop/acquire/round_seeds.h"
#include "loop/acquire/strategy.h"
#include "loop/ensemble/predictions.h"
#include "loop/run/crash_point.h"
#include "loop/update/oracle.h"
#include "store/store.h"
#include "store/transaction.h"

namespace cohort::loop {

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The picks: ids (best first) and their rows in the pool table.
struct Picks {
  std::vector<uint64_t> ids;
  std::vector<uint64_t> rows;
};

Result<Picks> Pick(const AcquireContext& c, int64_t round, const store::Table& pool,
                   const std::vector<MemberResult>& results, int64_t k) {
  Picks picks;
  if (k <= 0) return picks;
  const AcquisitionConfig& acquisition = c.config->acquisition;
  COHORT_ASSIGN_OR_RETURN(const Strategy* strategy,
                          LookUpStrategy(acquisition.StrategyOfRound(round),
                                         c.task.regression ? StrategyTask::kRegression
                                                           : StrategyTask::kClassification));
  // With pool_sample the members predicted only the round's sample: index i is pool row
  // (*sample)[i].
  const std::optional<std::vector<uint64_t>> sample =
      PoolSampleOfRound(acquisition.pool_sample, acquisition.seed, round, pool.size());
  PoolPickRequest request;
  request.rows = sample ? sample->size() : pool.size();
  request.task = c.task;
  request.classes = c.classes;
  request.k = k;
  request.seed = RoundSeed(acquisition.seed, round);
  request.band = acquisition.band;
  request.selection = acquisition.selection;
  request.batch_bald = acquisition.batch_bald;
  // A strategy that reads no predictions (random) gets none: its members did not predict the
  // pool (controller_impl.h, RoundReadsPoolPredictions).
  for (size_t i = 0; i < results.size() && strategy->reads_predictions(); ++i) {
    if (!results[i].done) continue;
    const std::string path = c.paths->Absolute(results[i].predictions_pool);
    request.predictions.emplace_back(i, path);
    const int64_t passes = c.config->members[i].dropout_passes;
    request.samples.push_back({i,
                               passes > 0 ? (std::filesystem::path(path).parent_path() /
                                             std::string(protocol::file::kPoolDropoutPasses))
                                                .string()
                                          : path,
                               passes});
  }
  COHORT_ASSIGN_OR_RETURN(PoolPicks picked, PickFromPool(*strategy, request));
  std::vector<AcquiredSample> samples;
  for (int64_t index : picked.indices) {
    const auto i = static_cast<uint64_t>(index);
    const uint64_t row = sample ? (*sample)[i] : i;
    picks.rows.push_back(row);
    picks.ids.push_back(pool.id(row));
    samples.push_back({static_cast<int64_t>(picks.ids.back()), picked.scores[i]});
  }
  COHORT_RETURN_IF_ERROR(c.journal->RecordAcquisition(c.run_id, round, samples));
  return picks;
}

// Generation `current` is one past the round's input: it must be this round's own commit.
Status CheckEarlierCommit(const AcquireContext& c, int64_t round, uint64_t generation,
                          uint64_t current, const std::vector<uint64_t>& ids) {
  const StoreConfig& tables = c.config->store;
  COHORT_ASSIGN_OR_RETURN(auto diff,
                          store::DiffGenerations(c.paths->store(), generation, current, c.env));
  std::vector<uint64_t> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  if (diff[tables.train].added != sorted || diff[tables.pool].removed != sorted) {
    return Status::Corruption(fmt::format(
        "{}: generation {} is not the commit of round {} (it does not move the samples the "
        "round picked from {} to {})",
        c.paths->store(), current, round, tables.pool, tables.train));
  }
  return Status::OK();
}

}  // namespace

Result<AcquireResult> AcquireAndCommit(const AcquireContext& c, int64_t round,
                                       const store::Snapshot& snap,
                                       const std::vector<MemberResult>& results, int64_t k,
                                       PhaseTimings* timings) {
  const LoopConfig& config = *c.config;
  const uint64_t generation = snap.generation();
  COHORT_ASSIGN_OR_RETURN(const store::Table* train, snap.table(config.store.train));
  COHORT_ASSIGN_OR_RETURN(const store::Table* pool, snap.table(config.store.pool));

  auto t0 = Clock::now();
  COHORT_RETURN_IF_ERROR(c.journal->SetRoundPhase(c.run_id, round, RoundStatus::kAcquiring));
  COHORT_ASSIGN_OR_RETURN(Picks picks, Pick(c, round, *pool, results, k));
  MaybeCrash("acquired");
  auto t1 = Clock::now();
  timings->acquire_s = Seconds(t1 - t0);

  AcquireResult out;
  out.output_generation = generation;
  out.acquired = picks.ids.size();
  if (picks.ids.empty()) {  // nothing to label: the next round retrains
    MaybeCrash("committed");
    return out;
  }

  // Has this round's commit already happened (a controller killed right after it)? The acquire
  // step is a round's first, so its commit is the one right after the round's input; command
  // steps after it may have committed more.
  COHORT_ASSIGN_OR_RETURN(auto history, store::ReadHistory(c.paths->store(), c.env));
  uint64_t current = history.back().generation;
  if (current >= generation + 1) {
    COHORT_RETURN_IF_ERROR(CheckEarlierCommit(c, round, generation, generation + 1, picks.ids));
    out.output_generation = generation + 1;
    MaybeCrash("committed");
    return out;
  }
  if (current != generation) {
    return Status::Corruption(fmt::format(
        "{}: CURRENT is generation {} but round {} of the journal trained on generation {}",
        c.paths->store(), current, round, generation));
  }
  COHORT_RETURN_IF_ERROR(c.journal->SetRoundPhase(c.run_id, round, RoundStatus::kLabelling));
  COHORT_ASSIGN_OR_RETURN(
      auto labels, LabelSamples(config, *c.paths, round, generation, *pool, *train, picks.ids,
                                picks.rows, c.classes, c.scheduler));
  auto t2 = Clock::now();
  timings->label_s = Seconds(t2 - t1);
  COHORT_RETURN_IF_ERROR(c.journal->SetRoundPhase(c.run_id, round, RoundStatus::kCommitting));
  COHORT_ASSIGN_OR_RETURN(
      auto txn, c.store_lock != nullptr
                    ? store::Transaction::BeginHeld(c.paths->store(), *c.store_lock, c.env)
                    : store::Transaction::Begin(c.paths->store(), c.env));
  out.notes = txn->notes();
  COHORT_RETURN_IF_ERROR(
      txn->Move(config.store.pool, config.store.train, picks.ids, labels ? &*labels : nullptr));
  COHORT_ASSIGN_OR_RETURN(
      out.output_generation,
      txn->Commit(fmt::format("cohort run {} round {}: {} samples by {}", config.name, round,
                              picks.ids.size(), config.acquisition.StrategyOfRound(round))));
  timings->commit_s = Seconds(Clock::now() - t2);
  MaybeCrash("committed");
  return out;
}

}  // namespace cohort::loop
