// The acquire update step: the round's strategy picks k pool samples by the members' pool
// predictions, the oracle labels them and one commit moves them to train (acquire_commit.h).
// Always a run's first step; without [[update]] tables, its only one.
#include <fmt/format.h>

#include "loop/update/acquire_commit.h"
#include "loop/update/update_step.h"

namespace cohort::loop {

Result<UpdateStepResult> RunAcquireStep(const UpdateStepInput& input) {
  const LoopConfig& config = *input.context->config;
  COHORT_ASSIGN_OR_RETURN(AcquireResult acquired,
                          AcquireAndCommit(*input.context, input.round, *input.round_snap,
                                           *input.results, input.k, input.timings));
  UpdateStepResult out;
  out.output_generation = acquired.output_generation;
  out.committed = acquired.output_generation != input.input_generation;
  out.notes = std::move(acquired.notes);
  out.summary = fmt::format("acquired {} by {}", acquired.acquired,
                            config.acquisition.StrategyOfRound(input.round));
  if (acquired.acquired > 0) {
    out.counts.tables[config.store.pool].moved_out = acquired.acquired;
    out.counts.tables[config.store.train].moved_in = acquired.acquired;
  }
  return out;
}

}  // namespace cohort::loop
