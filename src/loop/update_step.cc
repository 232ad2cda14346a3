#include "loop/update_step.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>

#include "loop/crash_point.h"
#include "store/snapshot.h"
#include "store/store.h"
#include "store/transaction.h"

namespace cohort::loop {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The members' prediction files, absolute, for the program (COHORT_PREDICTIONS).
json PredictionsJson(const AcquireContext& c, int64_t round, uint64_t round_generation,
                     const std::vector<MemberResult>& results) {
  json members = json::array();
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].done) continue;
    auto file = [&](const std::string& relative) {
      return relative.empty() ? json() : json(c.paths->Absolute(relative));
    };
    members.push_back({{"name", c.config->members[i].name},
                       {"pool", file(results[i].predictions_pool)},
                       {"test", file(results[i].predictions_test)}});
  }
  return {{"round", round},
          {"generation", round_generation},
          {"classes", c.classes},
          {"tables",
           {{"train", c.config->store.train},
            {"pool", c.config->store.pool},
            {"test", c.config->store.test}}},
          {"members", members}};
}

Status WriteText(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  {
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    if (f == nullptr) return Status::IOError("create " + tmp);
    bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    ok = std::fclose(f) == 0 && ok;
    if (!ok) return Status::IOError("write " + tmp);
  }
  return store::Env::Default()->RenameFile(tmp, path);
}

}  // namespace

std::string UpdateStepNotePrefix(const LoopConfig& config, int64_t round, size_t step_index) {
  const UpdateStepConfig& step = config.updates[step_index];
  return fmt::format("cohort run {} round {}: update step {} ({} {}):", config.name, round,
                     step_index + 1, UpdateKindName(step.kind), step.name);
}

std::string DescribeChangeCounts(const ChangeCounts& counts) {
  std::string out;
  for (const auto& [table, n] : counts.tables) {
    std::vector<std::string> parts;
    if (n.added) parts.push_back(fmt::format("{} added", n.added));
    if (n.removed) parts.push_back(fmt::format("{} removed", n.removed));
    if (n.moved_in) parts.push_back(fmt::format("{} moved in", n.moved_in));
    if (n.moved_out) parts.push_back(fmt::format("{} moved out", n.moved_out));
    if (n.relabelled) parts.push_back(fmt::format("{} relabelled", n.relabelled));
    if (parts.empty()) continue;
    out += (out.empty() ? "" : "; ") + table + ":";
    for (size_t i = 0; i < parts.size(); ++i) out += (i == 0 ? " " : ", ") + parts[i];
  }
  return out.empty() ? "no changes" : out;
}

Result<UpdateStepResult> RunCommandStep(const AcquireContext& c, int64_t round, size_t step_index,
                                        uint64_t round_generation, uint64_t input_generation,
                                        const std::vector<MemberResult>& results) {
  const LoopConfig& config = *c.config;
  const UpdateStepConfig& step = config.updates[step_index];
  const std::string what = fmt::format("update step {} (command {})", step_index + 1, step.name);
  const std::string note_prefix = UpdateStepNotePrefix(config, round, step_index);
  UpdateStepResult out;
  out.output_generation = input_generation;

  // Has this step's commit already happened (a controller killed right after it)? Its note
  // says so; anything else past the step's input is not the run's own doing.
  COHORT_ASSIGN_OR_RETURN(auto history, store::ReadHistory(c.paths->store(), c.env));
  for (const store::Manifest& m : history) {
    if (m.generation > round_generation && m.note.rfind(note_prefix, 0) == 0) {
      out.output_generation = m.generation;
      out.committed = true;
      out.resumed = true;
      out.summary = m.note.substr(note_prefix.size() + (m.note.size() > note_prefix.size()));
      return out;
    }
  }
  const uint64_t current = history.back().generation;
  if (current != input_generation) {
    return Status::Corruption(
        fmt::format("{}: CURRENT is generation {} but {} of round {} changes generation {}",
                    c.paths->store(), current, what, round, input_generation));
  }

  // A fresh start of the step: nothing an earlier, killed start wrote is trusted.
  const std::string dir = c.paths->Absolute(RunPaths::UpdateStepDir(round, step_index + 1));
  const std::string changes_dir = dir + "/changes";
  const std::string predictions_path = dir + "/predictions.json";
  std::error_code ec;
  fs::remove_all(changes_dir, ec);
  if (ec) return Status::IOError("clear " + changes_dir + ": " + ec.message());
  fs::create_directories(changes_dir, ec);
  if (ec) return Status::IOError("create " + changes_dir + ": " + ec.message());
  COHORT_RETURN_IF_ERROR(WriteText(
      predictions_path, PredictionsJson(c, round, round_generation, results).dump(2) + "\n"));

  launch::SpawnSpec spec;
  spec.argv = step.command;
  spec.cwd = fs::path(config.path).parent_path().string();
  if (spec.cwd.empty()) spec.cwd = ".";
  spec.stderr_path = dir + "/step.log";
  spec.wall_clock_limit = std::chrono::milliseconds(static_cast<int64_t>(step.timeout_s * 1000));
  spec.env = {{"COHORT_CHANGES_DIR", changes_dir},
              {"COHORT_PREDICTIONS", predictions_path},
              {"COHORT_STORE", c.paths->store()},
              {"COHORT_GENERATION", std::to_string(input_generation)},
              {"COHORT_ROUND", std::to_string(round)},
              {"COHORT_RUN_DIR", c.paths->root},
              {"COHORT_STEP", std::to_string(step_index + 1)},
              {"COHORT_STEP_NAME", step.name},
              {"COHORT_CLASSES", std::to_string(c.classes)}};
  auto exit = c.scheduler->RunProgram(spec);
  if (!exit.ok()) return exit.status().WithContext(what);
  if (exit->reason == launch::ExitReason::kKilledForWallClock) {
    return Status::InvalidArgument(
        fmt::format("{} did not finish within {} s (timeout_s) and was killed (its log: {})", what,
                    step.timeout_s, spec.stderr_path));
  }
  if (exit->reason != launch::ExitReason::kExited || exit->exit_code != 0) {
    return Status::InvalidArgument(fmt::format(
        "{}: {} {} (its log: {})", what, step.command.front(), exit->ToString(), spec.stderr_path));
  }
  MaybeCrash("update-ran");

  COHORT_ASSIGN_OR_RETURN(auto snap,
                          store::Snapshot::Open(c.paths->store(), input_generation, c.env));
  auto changes = ReadChangeSet(changes_dir, *snap, c.classes);
  if (!changes.ok()) return changes.status().WithContext(what);
  if (changes->empty()) {
    out.summary = "no changes";
    return out;
  }
  COHORT_ASSIGN_OR_RETURN(
      auto txn, c.store_lock != nullptr
                    ? store::Transaction::BeginHeld(c.paths->store(), *c.store_lock, c.env)
                    : store::Transaction::Begin(c.paths->store(), c.env));
  out.notes = txn->notes();
  auto counts = ApplyChangeSet(*changes, txn.get());
  if (!counts.ok()) return counts.status().WithContext(what);
  out.summary = DescribeChangeCounts(*counts);
  COHORT_ASSIGN_OR_RETURN(out.output_generation, txn->Commit(note_prefix + " " + out.summary));
  out.committed = true;
  MaybeCrash("update-committed");
  return out;
}

}  // namespace cohort::loop
