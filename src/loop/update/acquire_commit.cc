#include "loop/update/acquire_commit.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <utility>

#include "common/row_sample.h"
#include "common/worker_protocol.h"
#include "loop/acquire/acquisition.h"
#include "loop/acquire/batch_bald.h"
#include "loop/acquire/regression_scores.h"
#include "loop/acquire/round_seeds.h"
#include "loop/acquire/stream_scores.h"
#include "loop/ensemble/prediction_stream.h"
#include "loop/ensemble/predictions.h"
#include "loop/ensemble/regression.h"
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
  // A random round reads no predictions: its members did not predict the pool
  // (controller.cc, RoundReadsPoolPredictions).
  const bool random = !c.config->acquisition.ScoresPredictionsInRound(round);
  std::vector<std::pair<size_t, std::string>> files;
  std::vector<PoolSampleFile> samples_files;  // classification: MC-dropout passes where asked
  for (size_t i = 0; i < results.size() && !random; ++i) {
    if (!results[i].done) continue;
    const std::string path = c.paths->Absolute(results[i].predictions_pool);
    files.emplace_back(i, path);
    const int64_t passes = c.config->members[i].dropout_passes;
    samples_files.push_back({i,
                             passes > 0 ? (std::filesystem::path(path).parent_path() /
                                           std::string(protocol::file::kPoolDropoutPasses))
                                              .string()
                                        : path,
                             passes});
  }
  // With pool_sample the members predicted only the round's sample: index i is pool row
  // (*sample)[i].
  const std::optional<std::vector<uint64_t>> sample = PoolSampleOfRound(
      c.config->acquisition.pool_sample, c.config->acquisition.seed, round, pool.size());
  const uint64_t rows = sample ? sample->size() : pool.size();
  const AcquisitionConfig& acquisition = c.config->acquisition;
  const bool batchbald = acquisition.StrategyOfRound(round) == "batchbald";
  // Per-sample strategies score the files a block at a time (loop/ensemble/prediction_stream.h);
  // BatchBALD and regression runs stack them whole.
  StackedPredictions stacked;
  if (!random && c.task.regression) {
    COHORT_ASSIGN_OR_RETURN(stacked, StackPredictions(files, rows, c.task));
  } else if (!random && batchbald) {
    COHORT_ASSIGN_OR_RETURN(stacked, StackPoolSamples(samples_files, rows, c.classes));
  }
  std::vector<double> scores;
  if (random || (batchbald && !c.task.regression)) {
    // random: every sample scores 0 and the seeded tie-break draws the picks. BatchBALD:
    // SelectBatchBald scores BALD itself; the journal keeps the picks' gains, set below.
    scores.assign(rows, 0.0);
  } else if (c.task.regression) {
    COHORT_ASSIGN_OR_RETURN(auto view, MakeRegressionPredictions(stacked.data, stacked.members,
                                                                 stacked.samples, stacked.outputs));
    COHORT_ASSIGN_OR_RETURN(scores, ScoreRegression(acquisition.StrategyOfRound(round), view));
  } else {
    COHORT_ASSIGN_OR_RETURN(
        scores, StreamScores(acquisition.StrategyOfRound(round), samples_files, rows, c.classes));
  }
  // The same picks as Acquire when no band is set and the selection is the top k.
  const uint64_t seed = RoundSeed(acquisition.seed, round);
  std::vector<int64_t> picked;
  if (batchbald) {
    // The journal keeps each pick's BatchBALD gain: what it added given the picks before it.
    COHORT_ASSIGN_OR_RETURN(auto view, MakeEnsemblePredictions(stacked.data, stacked.members,
                                                               stacked.samples, stacked.classes));
    COHORT_ASSIGN_OR_RETURN(BatchBaldPicks joint, SelectBatchBald(view, k, seed, acquisition.band,
                                                                  acquisition.batch_bald));
    for (size_t j = 0; j < joint.indices.size(); ++j) {
      scores[static_cast<size_t>(joint.indices[j])] = joint.gains[j];
    }
    picked = std::move(joint.indices);
  } else {
    COHORT_ASSIGN_OR_RETURN(picked,
                            SelectBatch(scores, k, seed, acquisition.band, acquisition.selection));
  }
  std::vector<AcquiredSample> samples;
  for (int64_t index : picked) {
    const auto i = static_cast<uint64_t>(index);
    const uint64_t row = sample ? (*sample)[i] : i;
    picks.rows.push_back(row);
    picks.ids.push_back(pool.id(row));
    samples.push_back({static_cast<int64_t>(picks.ids.back()), scores[i]});
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
