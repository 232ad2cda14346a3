#include "loop/run/run_reader.h"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

namespace cohort::loop {

namespace fs = std::filesystem;

namespace {

std::string UnderRun(const RunPaths& paths, const std::string& path) {
  return !path.empty() && path[0] == '/' ? path : paths.Absolute(path);
}

}  // namespace

std::string RunReader::StatusText() const {
  if (run.status == RunStatus::kRunning && !controller_pid) return "interrupted";
  return std::string(RunStatusName(run.status));
}

Result<RunReader> OpenRunReader(const std::string& run_dir_in) {
  std::error_code ec;
  std::string run_dir = fs::absolute(run_dir_in, ec).lexically_normal().string();
  if (run_dir.size() > 1 && run_dir.back() == '/') run_dir.pop_back();
  RunReader r;
  r.paths = RunPaths{run_dir};
  if (!fs::exists(r.paths.config()) || !fs::exists(r.paths.journal())) {
    return Status::NotFound(run_dir_in + ": not a cohort run directory (no loop.toml and run.db)");
  }
  COHORT_ASSIGN_OR_RETURN(std::string text, ReadLoopConfigText(r.paths.config()));
  COHORT_ASSIGN_OR_RETURN(r.config, ParseLoopConfig(text, r.paths.config(), run_dir));
  COHORT_ASSIGN_OR_RETURN(r.journal, Journal::Open(r.paths.journal(), {.read_only = true}));
  COHORT_ASSIGN_OR_RETURN(r.run, r.journal->FindRun(r.config.name));
  r.controller_pid = RunLockHolder(run_dir);
  return r;
}

Result<std::pair<int64_t, std::vector<FinishedMember>>> FinishedMembersOf(
    const RunReader& run, std::optional<int64_t> round) {
  COHORT_ASSIGN_OR_RETURN(auto rounds, run.journal->RoundsOf(run.run.id));
  const RoundRecord* chosen = nullptr;
  if (round) {
    for (const RoundRecord& r : rounds) {
      if (r.round == *round) chosen = &r;
    }
    if (chosen == nullptr) {
      return Status::NotFound("run " + run.run.name + " has no round " + std::to_string(*round) +
                              (rounds.empty()
                                   ? " (no round has started)"
                                   : " (rounds 0 to " + std::to_string(rounds.back().round) + ")"));
    }
    if (chosen->status != RoundStatus::kDone) {
      return Status::InvalidArgument("round " + std::to_string(*round) + " of run " + run.run.name +
                                     " is not finished (status " +
                                     std::string(RoundStatusName(chosen->status)) + ")");
    }
  } else {
    for (const RoundRecord& r : rounds) {
      if (r.status == RoundStatus::kDone) chosen = &r;
    }
    if (chosen == nullptr) {
      return Status::NotFound("run " + run.run.name + " has no finished round yet");
    }
  }
  COHORT_ASSIGN_OR_RETURN(auto attempts, run.journal->AttemptsOfRound(run.run.id, chosen->round));
  std::vector<FinishedMember> out;
  for (size_t i = 0; i < run.config.members.size(); i++) {
    const std::string& name = run.config.members[i].name;
    const AttemptRecord* last = nullptr;
    for (const AttemptRecord& a : attempts) {
      if (a.member == name && (last == nullptr || a.attempt > last->attempt)) last = &a;
    }
    if (last == nullptr || last->status != AttemptStatus::kDone) continue;
    FinishedMember m;
    m.name = name;
    m.config_index = i;
    m.attempt = last->attempt;
    m.device = last->device;
    if (last->checkpoint && !last->checkpoint->empty()) {
      m.checkpoint = UnderRun(run.paths, *last->checkpoint);
    }
    if (last->predictions_json) {
      auto j = nlohmann::json::parse(*last->predictions_json, nullptr, false);
      if (j.is_object() && j.contains("test") && j["test"].is_string()) {
        m.test_predictions = UnderRun(run.paths, j["test"].get<std::string>());
      }
    }
    out.push_back(std::move(m));
  }
  if (out.empty()) {
    return Status::NotFound("round " + std::to_string(chosen->round) + " of run " + run.run.name +
                            " has no finished member");
  }
  return std::make_pair(chosen->round, std::move(out));
}

Result<std::pair<int64_t, std::vector<FinishedMember>>> NativeMembersOf(
    const RunReader& run, std::optional<int64_t> round, const std::string& verb) {
  COHORT_ASSIGN_OR_RETURN(auto chosen, FinishedMembersOf(run, round));
  for (const auto& m : chosen.second) {
    if (m.checkpoint.empty()) {
      return Status::InvalidArgument(fmt::format(
          "round {} member {} is an outside-script member: {} native members only (its weights "
          "are its script's own)",
          chosen.first, m.name, verb));
    }
  }
  return chosen;
}

Result<RoundTrainTable> TrainTableOfRound(const RunReader& run, int64_t round) {
  COHORT_ASSIGN_OR_RETURN(auto rounds, run.journal->RoundsOf(run.run.id));
  for (const auto& r : rounds) {
    if (r.round != round) continue;
    RoundTrainTable out;
    COHORT_ASSIGN_OR_RETURN(out.snapshot,
                            store::Snapshot::Open(run.paths.store(), r.input_generation));
    COHORT_ASSIGN_OR_RETURN(out.table, out.snapshot->table(run.config.store.train));
    return out;
  }
  return Status::NotFound(fmt::format("{}: round {} is not in the journal", run.paths.root, round));
}

Result<double> RoundTemperature(const RunReader& run, int64_t round) {
  COHORT_ASSIGN_OR_RETURN(auto rounds, run.journal->RoundsOf(run.run.id));
  for (const auto& r : rounds) {
    if (r.round != round) continue;
    if (!r.test.temperature) {
      return Status::NotFound(
          fmt::format("{}: round {} has no test temperature in the journal (the loop fits one to "
                      "classification runs with 2 or more test rows, since journal version 6)",
                      run.paths.root, round));
    }
    return *r.test.temperature;
  }
  return Status::NotFound(fmt::format("{}: round {} is not in the journal", run.paths.root, round));
}

}  // namespace cohort::loop
