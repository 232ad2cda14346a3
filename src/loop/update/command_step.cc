// The command update step: a user's program changes the dataset between rounds by writing a
// change set (change_set_step.h, docs/updates.md), after the round's members are scored.
//
// The program runs like a command oracle (argv as configured, no shell, in the config file's
// directory, through the scheduler so the workers keep being served), with stdout and stderr
// appended to RUN_DIR/updates/round-RRRR/step-K/step.log and this environment:
//   COHORT_CHANGES_DIR      the change-set directory to write (empty when the program starts)
//   COHORT_PREDICTIONS      a JSON file naming each finished member's prediction files for the
//                           pool and test tables, and the train table's when the step has
//                           predict = ["train"] (rows of the round's trained generation)
//   COHORT_STORE, COHORT_GENERATION (the generation the step changes), COHORT_ROUND,
//   COHORT_RUN_DIR, COHORT_STEP (K, from 1), COHORT_STEP_NAME, COHORT_CLASSES.
// A non-zero exit or a timeout fails the step with one line naming it and its log; nothing is
// committed.
#include <fmt/format.h>

#include <chrono>
#include <filesystem>

#include "loop/run/crash_point.h"
#include "loop/update/change_set_step.h"
#include "loop/update/update_step.h"

namespace cohort::loop {

namespace fs = std::filesystem;

Result<UpdateStepResult> RunCommandStep(const UpdateStepInput& input) {
  const AcquireContext& c = *input.context;
  const UpdateStepConfig& step = input.step();
  COHORT_ASSIGN_OR_RETURN(BegunStep begun, BeginChangeSetStep(input));
  if (begun.ended) return *begun.ended;
  const ChangeSetStep& s = begun.step;
  launch::SpawnSpec spec;
  spec.argv = step.command;
  spec.cwd = fs::path(c.config->path).parent_path().string();
  if (spec.cwd.empty()) spec.cwd.push_back('.');  // not = ".": g++ 12's false -Wrestrict
  spec.stderr_path = s.dir + "/step.log";
  spec.wall_clock_limit = std::chrono::milliseconds(static_cast<int64_t>(step.timeout_s * 1000));
  spec.env = {{"COHORT_CHANGES_DIR", s.changes_dir},
              {"COHORT_PREDICTIONS", s.predictions_path},
              {"COHORT_STORE", c.paths->store()},
              {"COHORT_GENERATION", std::to_string(input.input_generation)},
              {"COHORT_ROUND", std::to_string(input.round)},
              {"COHORT_RUN_DIR", c.paths->root},
              {"COHORT_STEP", std::to_string(input.step_index + 1)},
              {"COHORT_STEP_NAME", step.name},
              {"COHORT_CLASSES", std::to_string(c.classes)}};
  auto exit = c.scheduler->RunProgram(spec);
  if (!exit.ok()) return exit.status().WithContext(s.what);
  if (exit->reason == launch::ExitReason::kKilledForWallClock) {
    return Status::InvalidArgument(
        fmt::format("{} did not finish within {} s (timeout_s) and was killed (its log: {})",
                    s.what, step.timeout_s, spec.stderr_path));
  }
  if (exit->reason != launch::ExitReason::kExited || exit->exit_code != 0) {
    return Status::InvalidArgument(fmt::format("{}: {} {} (its log: {})", s.what,
                                               step.command.front(), exit->ToString(),
                                               spec.stderr_path));
  }
  MaybeCrash("update-ran");
  return CommitChangeSet(input, s);
}

}  // namespace cohort::loop
