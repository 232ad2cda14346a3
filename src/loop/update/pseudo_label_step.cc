// The pseudo_label update step (self-training): the pool samples the ensemble is confident
// about (pseudo_label.h) move to train with the ensemble's classes, as a change set
// (change_set_step.h).
#include <nlohmann/json.hpp>

#include "loop/update/change_set_step.h"
#include "loop/update/pseudo_label.h"
#include "loop/update/update_step.h"
#include "store/store.h"

namespace cohort::loop {

namespace {

using nlohmann::json;

// The pseudo_label step's change set, written into `changes_dir` as a program would write it:
// the qualifying pool samples (pseudo_label.h) move to train with the ensemble's classes. The
// members predicted the pool of `round_snap`; samples an earlier step of the round took out of
// the pool (`input_snap`) are passed over. Returns how many it picked.
Result<size_t> WritePseudoLabels(const AcquireContext& c, const UpdateStepConfig& step,
                                 const store::Snapshot& round_snap,
                                 const store::Snapshot& input_snap,
                                 const std::vector<MemberResult>& results,
                                 const std::string& changes_dir) {
  const StoreConfig& tables = c.config->store;
  COHORT_ASSIGN_OR_RETURN(const store::Table* pool, round_snap.table(tables.pool));
  COHORT_ASSIGN_OR_RETURN(
      StackedPredictions stacked,
      StackMemberFiles(c, results, tables.pool, &MemberResult::predictions_pool, pool->size()));
  COHORT_ASSIGN_OR_RETURN(auto view, MakeEnsemblePredictions(stacked.data, stacked.members,
                                                             stacked.samples, stacked.classes));
  COHORT_ASSIGN_OR_RETURN(std::vector<bool> eligible,
                          StillThere(round_snap, input_snap, tables.pool));
  const PseudoLabelRule rule{.threshold = step.threshold,
                             .agreement = step.agreement,
                             .max_per_round = step.max_per_round,
                             .max_per_class = step.max_per_class};
  COHORT_ASSIGN_OR_RETURN(auto picks, SelectPseudoLabels(view, rule, &eligible));
  std::vector<uint64_t> ids;
  std::vector<int64_t> labels;
  for (const PseudoLabel& p : picks) {
    ids.push_back(pool->id(static_cast<uint64_t>(p.sample)));
    labels.push_back(p.label);
  }
  json changes = json::object();
  if (!ids.empty()) {
    COHORT_RETURN_IF_ERROR(WriteIds(changes_dir + "/ids.npy", ids));
    COHORT_RETURN_IF_ERROR(WriteClassLabels(changes_dir + "/labels.npy", labels));
    changes["move"] = json::array({{{"from", tables.pool},
                                    {"to", tables.train},
                                    {"ids", "ids.npy"},
                                    {"labels", "labels.npy"}}});
  }
  COHORT_RETURN_IF_ERROR(WriteText(changes_dir + "/changes.json", changes.dump(1) + "\n"));
  return ids.size();
}

}  // namespace

Result<UpdateStepResult> RunPseudoLabelStep(const UpdateStepInput& input) {
  const AcquireContext& c = *input.context;
  const UpdateStepConfig& step = input.step();
  COHORT_ASSIGN_OR_RETURN(BegunStep begun, BeginChangeSetStep(input));
  if (begun.ended) return *begun.ended;
  const ChangeSetStep& s = begun.step;
  auto written =
      WritePseudoLabels(c, step, *input.round_snap, *s.input_snap, *input.results, s.changes_dir);
  if (!written.ok()) return written.status().WithContext(s.what);
  return CommitChangeSet(input, s);
}

}  // namespace cohort::loop
