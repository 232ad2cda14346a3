#include "loop/update/update_step.h"

#include <algorithm>
#include <chrono>

namespace cohort::loop {

// The kinds' run functions, one file each.
Result<UpdateStepResult> RunAcquireStep(const UpdateStepInput& input);
Result<UpdateStepResult> RunCommandStep(const UpdateStepInput& input);
Result<UpdateStepResult> RunPseudoLabelStep(const UpdateStepInput& input);
Result<UpdateStepResult> RunImportNewStep(const UpdateStepInput& input);
Result<UpdateStepResult> RunRelabelOrDropStep(const UpdateStepInput& input);

namespace {

struct StepKind {
  UpdateStepConfig::Kind kind;
  Result<UpdateStepResult> (*run)(const UpdateStepInput& input);
  // Its wall time is the round's commit phase; acquire splits its own into acquire, label and
  // commit (AcquireAndCommit).
  bool counts_as_commit;
};

constexpr StepKind kStepKinds[] = {
    {UpdateStepConfig::Kind::kAcquire, RunAcquireStep, false},
    {UpdateStepConfig::Kind::kCommand, RunCommandStep, true},
    {UpdateStepConfig::Kind::kPseudoLabel, RunPseudoLabelStep, true},
    {UpdateStepConfig::Kind::kImportNew, RunImportNewStep, true},
    {UpdateStepConfig::Kind::kRelabelOrDrop, RunRelabelOrDropStep, true},
};

}  // namespace

Result<UpdateStepResult> RunUpdateStep(const UpdateStepInput& input) {
  const auto* row = std::find_if(std::begin(kStepKinds), std::end(kStepKinds),
                                 [&](const StepKind& k) { return k.kind == input.step().kind; });
  if (row == std::end(kStepKinds)) {
    return Status::InvalidArgument(std::string("no runner for update steps of kind ") +
                                   UpdateKindName(input.step().kind));
  }
  const auto t0 = std::chrono::steady_clock::now();
  COHORT_ASSIGN_OR_RETURN(UpdateStepResult out, row->run(input));
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (row->counts_as_commit) input.timings->commit_s += out.seconds;
  return out;
}

}  // namespace cohort::loop
