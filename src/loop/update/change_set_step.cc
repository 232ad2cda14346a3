#include "loop/update/change_set_step.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>

#include "loop/run/crash_point.h"
#include "store/import.h"
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
    json member = {{"name", c.config->members[i].name},
                   {"pool", file(results[i].predictions_pool)},
                   {"test", file(results[i].predictions_test)}};
    if (!results[i].predictions_train.empty()) {
      member["train"] = file(results[i].predictions_train);
    }
    members.push_back(std::move(member));
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

}  // namespace

std::string DescribeStep(const UpdateStepConfig& step) {
  const std::string kind = UpdateKindName(step.kind);
  return step.name == kind ? kind : kind + " " + step.name;
}

Result<StackedPredictions> StackMemberFiles(const AcquireContext& c,
                                            const std::vector<MemberResult>& results,
                                            const std::string& table,
                                            std::string MemberResult::*file_of, uint64_t rows) {
  std::vector<std::pair<size_t, std::string>> files;
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].done) continue;
    if ((results[i].*file_of).empty()) {
      return Status::InvalidArgument(fmt::format("{} did not predict the {} table this round",
                                                 c.config->members[i].name, table));
    }
    files.emplace_back(i, c.paths->Absolute(results[i].*file_of));
  }
  return StackPredictions(files, rows);
}

Result<std::vector<bool>> StillThere(const store::Snapshot& round_snap,
                                     const store::Snapshot& input_snap, const std::string& name) {
  COHORT_ASSIGN_OR_RETURN(const store::Table* then, round_snap.table(name));
  COHORT_ASSIGN_OR_RETURN(const store::Table* now_table, input_snap.table(name));
  const std::vector<uint64_t> now = now_table->Ids();
  const std::set<uint64_t> present(now.begin(), now.end());
  std::vector<bool> eligible(then->size());
  for (uint64_t row = 0; row < then->size(); ++row) {
    eligible[row] = present.count(then->id(row)) > 0;
  }
  return eligible;
}

Status WriteIds(const std::string& path, const std::vector<uint64_t>& ids) {
  store::HostArray array(store::Dtype::kUint64, {ids.size()});
  if (!ids.empty()) std::memcpy(array.data.data(), ids.data(), ids.size() * sizeof(uint64_t));
  return store::WriteNpyFile(path, array);
}

Status WriteClassLabels(const std::string& path, const std::vector<int64_t>& labels) {
  store::HostArray array(store::Dtype::kInt64, {labels.size()});
  if (!labels.empty()) {
    std::memcpy(array.data.data(), labels.data(), labels.size() * sizeof(int64_t));
  }
  return store::WriteNpyFile(path, array);
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

std::string UpdateStepNotePrefix(const LoopConfig& config, int64_t round, size_t step_index) {
  const UpdateStepConfig& step = config.updates[step_index];
  return fmt::format("cohort run {} round {}: update step {} ({}):", config.name, round,
                     step_index + 1, DescribeStep(step));
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

ChangeCounts ParseChangeCounts(const std::string& summary) {
  ChangeCounts counts;
  size_t start = 0;
  while (start <= summary.size()) {
    size_t end = summary.find("; ", start);
    const std::string part =
        summary.substr(start, end == std::string::npos ? std::string::npos : end - start);
    start = end == std::string::npos ? summary.size() + 1 : end + 2;
    const size_t colon = part.find(": ");
    if (colon == std::string::npos) continue;
    TableChangeCounts table;
    bool any = false;
    std::string_view rest(part);
    rest.remove_prefix(colon + 2);
    while (!rest.empty()) {
      const size_t comma = rest.find(", ");
      std::string_view item = rest.substr(0, comma);
      rest.remove_prefix(comma == std::string_view::npos ? rest.size() : comma + 2);
      const size_t space = item.find(' ');
      if (space == std::string_view::npos) continue;
      uint64_t n = 0;
      auto [ptr, ec] = std::from_chars(item.data(), item.data() + space, n);
      if (ec != std::errc() || ptr != item.data() + space) continue;
      const std::string_view verb = item.substr(space + 1);
      uint64_t* field = verb == "added"        ? &table.added
                        : verb == "removed"    ? &table.removed
                        : verb == "moved in"   ? &table.moved_in
                        : verb == "moved out"  ? &table.moved_out
                        : verb == "relabelled" ? &table.relabelled
                                               : nullptr;
      if (field == nullptr) continue;
      *field = n;
      any = true;
    }
    if (any) counts.tables[part.substr(0, colon)] = table;
  }
  return counts;
}

std::string ChangeCountsJson(const ChangeCounts& counts) {
  json out = json::object();
  for (const auto& [table, n] : counts.tables) {
    out[table] = {{"added", n.added},
                  {"removed", n.removed},
                  {"moved_in", n.moved_in},
                  {"moved_out", n.moved_out},
                  {"relabelled", n.relabelled}};
  }
  return out.dump();
}

Result<BegunStep> BeginChangeSetStep(const UpdateStepInput& input) {
  const AcquireContext& c = *input.context;
  const LoopConfig& config = *c.config;
  const int64_t round = input.round;
  const size_t step_index = input.step_index;
  const uint64_t round_generation = input.round_snap->generation();
  const uint64_t input_generation = input.input_generation;
  COHORT_RETURN_IF_ERROR(c.journal->SetRoundPhase(c.run_id, round, RoundStatus::kCommitting));
  BegunStep begun;
  ChangeSetStep& s = begun.step;
  s.what = fmt::format("update step {} ({})", step_index + 1, DescribeStep(input.step()));
  s.note_prefix = UpdateStepNotePrefix(config, round, step_index);
  const std::string& what = s.what;
  const std::string& note_prefix = s.note_prefix;
  UpdateStepResult out;
  out.output_generation = input_generation;

  // Has this step's commit already happened (a controller killed right after it)? Its note
  // says so; anything else past the step's input is not the run's own doing.
  COHORT_ASSIGN_OR_RETURN(s.history, store::ReadHistory(c.paths->store(), c.env));
  const std::vector<store::Manifest>& history = s.history;
  for (const store::Manifest& m : history) {
    if (m.generation > round_generation && m.note.rfind(note_prefix, 0) == 0) {
      out.output_generation = m.generation;
      out.committed = true;
      out.resumed = true;
      out.summary = m.note.substr(note_prefix.size() + (m.note.size() > note_prefix.size()));
      out.counts = ParseChangeCounts(out.summary);
      begun.ended = out;
      return begun;
    }
  }
  // Steps run in order, so a later step's commit means this one ended before it, committing
  // nothing (its journal record was written then).
  for (size_t later = step_index + 1; later < config.updates.size(); ++later) {
    const std::string later_prefix = UpdateStepNotePrefix(config, round, later);
    for (const store::Manifest& m : history) {
      if (m.generation > round_generation && m.note.rfind(later_prefix, 0) == 0) {
        out.resumed = true;
        out.summary = "no changes";
        begun.ended = out;
        return begun;
      }
    }
  }
  const uint64_t current = history.back().generation;
  if (current != input_generation) {
    return Status::Corruption(
        fmt::format("{}: CURRENT is generation {} but {} of round {} changes generation {}",
                    c.paths->store(), current, what, round, input_generation));
  }

  // A fresh start of the step: nothing an earlier, killed start wrote is trusted.
  s.dir = c.paths->Absolute(RunPaths::UpdateStepDir(round, step_index + 1));
  s.changes_dir = s.dir + "/changes";
  s.predictions_path = s.dir + "/predictions.json";
  const std::string& changes_dir = s.changes_dir;
  std::error_code ec;
  fs::remove_all(changes_dir, ec);
  if (ec) return Status::IOError("clear " + changes_dir + ": " + ec.message());
  fs::create_directories(changes_dir, ec);
  if (ec) return Status::IOError("create " + changes_dir + ": " + ec.message());
  COHORT_ASSIGN_OR_RETURN(s.input_snap,
                          store::Snapshot::Open(c.paths->store(), input_generation, c.env));
  COHORT_RETURN_IF_ERROR(
      WriteText(s.predictions_path,
                PredictionsJson(c, round, round_generation, *input.results).dump(2) + "\n"));
  return begun;
}

Result<UpdateStepResult> CommitChangeSet(const UpdateStepInput& input, const ChangeSetStep& step,
                                         const std::string& note_extra) {
  const AcquireContext& c = *input.context;
  const std::string& what = step.what;
  UpdateStepResult out;
  out.output_generation = input.input_generation;
  COHORT_ASSIGN_OR_RETURN(auto snap,
                          store::Snapshot::Open(c.paths->store(), input.input_generation, c.env));
  auto changes = ReadChangeSet(step.changes_dir, *snap, c.classes);
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
  out.counts = *counts;
  COHORT_ASSIGN_OR_RETURN(out.output_generation,
                          txn->Commit(step.note_prefix + " " + out.summary + note_extra));
  out.summary += note_extra;
  out.committed = true;
  MaybeCrash("update-committed");
  return out;
}

}  // namespace cohort::loop
