// The relabel_or_drop update step (curation): train samples whose stored label the ensemble
// finds improbable (relabel_or_drop.h) are dropped, or asked of the oracle again and relabelled
// where it answers differently, as a change set (change_set_step.h).
#include <fmt/format.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>

#include "loop/config/class_labels.h"
#include "loop/update/change_set_step.h"
#include "loop/update/oracle.h"
#include "loop/update/relabel_or_drop.h"
#include "loop/update/update_step.h"
#include "store/store.h"

namespace cohort::loop {

namespace {

using nlohmann::json;

// The relabel_or_drop step's change set, written into `changes_dir`: the suspect train samples
// (relabel_or_drop.h) of the members' train predictions, which were made on `round_snap`'s
// train table, passing over samples an earlier step of the round took out (`input_snap`).
// Dropped, or asked of the oracle (its files in the step's directory, reused on resume for the
// same ids) and relabelled where it answers differently. Returns the note's extra words.
Result<std::string> WriteSuspects(const AcquireContext& c, const UpdateStepConfig& step,
                                  int64_t round, size_t step_index,
                                  const store::Snapshot& round_snap,
                                  const store::Snapshot& input_snap,
                                  const std::vector<MemberResult>& results,
                                  const std::string& changes_dir) {
  const std::string& train_name = c.config->store.train;
  COHORT_ASSIGN_OR_RETURN(const store::Table* train, round_snap.table(train_name));
  COHORT_ASSIGN_OR_RETURN(
      StackedPredictions stacked,
      StackMemberFiles(c, results, train_name, &MemberResult::predictions_train, train->size()));
  COHORT_ASSIGN_OR_RETURN(auto view, MakeEnsemblePredictions(stacked.data, stacked.members,
                                                             stacked.samples, stacked.classes));
  COHORT_ASSIGN_OR_RETURN(std::vector<bool> eligible,
                          StillThere(round_snap, input_snap, train_name));
  const std::vector<int64_t> stored = ClassLabelsOf(*train);
  const SuspectRule rule{.threshold = step.threshold, .max_per_round = step.max_per_round};
  COHORT_ASSIGN_OR_RETURN(auto suspects, SelectSuspectLabels(view, stored, rule, &eligible));
  std::vector<uint64_t> ids, rows;
  for (const SuspectLabel& s : suspects) {
    rows.push_back(static_cast<uint64_t>(s.sample));
    ids.push_back(train->id(rows.back()));
  }
  json changes = json::object();
  std::string extra;
  if (step.action == UpdateStepConfig::Action::kDrop) {
    if (!ids.empty()) {
      COHORT_RETURN_IF_ERROR(WriteIds(changes_dir + "/remove-ids.npy", ids));
      changes["remove"] = json::array({{{"table", train_name}, {"ids", "remove-ids.npy"}}});
    }
  } else if (!ids.empty()) {
    const std::string oracle_dir = RunPaths::UpdateStepDir(round, step_index + 1) + "/oracle";
    COHORT_ASSIGN_OR_RETURN(
        std::optional<store::HostArray> answer,
        LabelSamples(*c.config, *c.paths, round, input_snap.generation(), *train, *train, ids, rows,
                     c.classes, c.scheduler, oracle_dir));
    if (!answer || answer->dtype != store::Dtype::kInt64 || answer->shape.size() != 1 ||
        answer->shape[0] != ids.size()) {
      return Status::InvalidArgument(
          "relabel_or_drop: the oracle's answer is not one class per sample");
    }
    std::vector<int64_t> given(ids.size());
    std::memcpy(given.data(), answer->data.data(), given.size() * sizeof(int64_t));
    std::vector<uint64_t> changed_ids;
    std::vector<int64_t> changed_labels;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (given[i] == suspects[i].label) continue;
      changed_ids.push_back(ids[i]);
      changed_labels.push_back(given[i]);
    }
    if (!changed_ids.empty()) {
      COHORT_RETURN_IF_ERROR(WriteIds(changes_dir + "/relabel-ids.npy", changed_ids));
      COHORT_RETURN_IF_ERROR(WriteClassLabels(changes_dir + "/relabel-y.npy", changed_labels));
      changes["relabel"] = json::array(
          {{{"table", train_name}, {"ids", "relabel-ids.npy"}, {"labels", "relabel-y.npy"}}});
    }
    extra = fmt::format("; the oracle kept {} of {} suspect label(s)",
                        ids.size() - changed_ids.size(), ids.size());
  }
  COHORT_RETURN_IF_ERROR(WriteText(changes_dir + "/changes.json", changes.dump(1) + "\n"));
  if (ids.empty()) extra = fmt::format("; no train label below probability {}", step.threshold);
  return extra;
}

}  // namespace

Result<UpdateStepResult> RunRelabelOrDropStep(const UpdateStepInput& input) {
  const AcquireContext& c = *input.context;
  const UpdateStepConfig& step = input.step();
  COHORT_ASSIGN_OR_RETURN(BegunStep begun, BeginChangeSetStep(input));
  if (begun.ended) return *begun.ended;
  const ChangeSetStep& s = begun.step;
  auto extra = WriteSuspects(c, step, input.round, input.step_index, *input.round_snap,
                             *s.input_snap, *input.results, s.changes_dir);
  if (!extra.ok()) return extra.status().WithContext(s.what);
  auto committed = CommitChangeSet(input, s, *extra);
  // Nothing to commit still says why (no suspect, or the oracle kept every label).
  if (committed.ok() && !committed->committed) committed->summary += *extra;
  return committed;
}

}  // namespace cohort::loop
