#include "loop/update/update_step.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <system_error>

#include "loop/config/class_labels.h"
#include "loop/ensemble/predictions.h"
#include "loop/run/crash_point.h"
#include "loop/update/oracle.h"
#include "loop/update/pseudo_label.h"
#include "loop/update/relabel_or_drop.h"
#include "store/import.h"
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

Status WriteText(const std::string& path, const std::string& text);

// "command fix.py", or "pseudo_label" for a built-in step under its default name.
std::string DescribeStep(const UpdateStepConfig& step) {
  const std::string kind = UpdateKindName(step.kind);
  return step.name == kind ? kind : kind + " " + step.name;
}

// The finished members' class probabilities of `table` (the pool or the train table, whose
// files are `file_of` each result), `rows` rows each, stacked for the ensemble's view.
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

// Which rows of `table` in `round_snap` are still in that table in `input_snap` (an earlier
// step of the round may have taken some out).
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

// Where an import_new commit's note lists its files: "...; files: a.csv (100), b.npy (20)".
constexpr std::string_view kImportedFilesMarker = "; files: ";

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The files this import_new step took in earlier rounds of the run, from its commit notes: the
// store's own history is the record, so a file is imported once even across a crash between
// the commit and anything after it.
std::set<std::string> ImportedBefore(const LoopConfig& config, const UpdateStepConfig& step,
                                     const std::vector<store::Manifest>& history) {
  const std::string run = "cohort run " + config.name + " round ";
  const std::string which = "(" + DescribeStep(step) + "): ";
  std::set<std::string> names;
  for (const store::Manifest& m : history) {
    if (m.note.rfind(run, 0) != 0 || m.note.find(which) == std::string::npos) continue;
    size_t at = m.note.find(kImportedFilesMarker);
    if (at == std::string::npos) continue;
    std::string_view list(m.note);
    list.remove_prefix(at + kImportedFilesMarker.size());
    while (!list.empty()) {
      size_t end = list.find(", ");
      std::string_view entry = list.substr(0, end);
      names.emplace(entry.substr(0, entry.rfind(" (")));
      if (end == std::string_view::npos) break;
      list.remove_prefix(end + 2);
    }
  }
  return names;
}

// The import_new step's change set: every .npy and .csv file in the step's directory that it
// has not imported before, in name order, converted to the table's dtypes and written into
// `changes_dir` as one add each (features, and labels when the table has them: a CSV's
// label_column, an X.npy's X.labels.npy). Returns (file name, rows) per file taken.
Result<std::vector<std::pair<std::string, uint64_t>>> WriteImports(
    const AcquireContext& c, const UpdateStepConfig& step,
    const std::vector<store::Manifest>& history, const store::Snapshot& snap,
    const std::string& changes_dir) {
  std::error_code ec;
  if (!fs::is_directory(step.directory, ec)) {
    return Status::NotFound("import_new: directory " + step.directory + " does not exist");
  }
  const std::set<std::string> before = ImportedBefore(*c.config, step, history);
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(step.directory, ec)) {
    const std::string name = entry.path().filename().string();
    // Hidden and temporary names are files still being written (write, then rename).
    if (name.empty() || name.front() == '.' || !entry.is_regular_file()) continue;
    if (!(EndsWith(name, ".csv") || EndsWith(name, ".npy")) || EndsWith(name, ".labels.npy")) {
      continue;
    }
    if (before.count(name) == 0) names.push_back(name);
  }
  if (ec) return Status::IOError("import_new: list " + step.directory + ": " + ec.message());
  std::sort(names.begin(), names.end());
  COHORT_ASSIGN_OR_RETURN(const store::Table* table, snap.table(step.table));
  const store::TableSchema& schema = table->schema();
  json adds = json::array();
  std::vector<std::pair<std::string, uint64_t>> taken;
  for (const std::string& name : names) {
    for (char ch : name) {
      if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-')) {
        return Status::InvalidArgument(fmt::format(
            "import_new: {}/{}: rename the file to letters, digits, '.', '_' and '-' only (the "
            "commit note records it by name)",
            step.directory, name));
      }
    }
    const std::string path = step.directory + "/" + name;
    store::HostArray x, y;
    if (EndsWith(name, ".csv")) {
      if (!schema.has_labels()) {
        return Status::InvalidArgument(
            fmt::format("import_new: {}: table '{}' holds no labels; bring its samples as .npy "
                        "features",
                        path, step.table));
      }
      store::CsvOptions options;
      options.label_column = step.label_column;
      options.label_type = schema.label_kind == store::LabelKind::kClass
                               ? store::CsvOptions::LabelType::kClass
                               : store::CsvOptions::LabelType::kVector;
      options.classes = c.classes;
      COHORT_ASSIGN_OR_RETURN(auto xy, store::ReadCsvDataset(path, options));
      x = std::move(xy.first);
      y = std::move(xy.second);
    } else {
      COHORT_ASSIGN_OR_RETURN(auto raw, store::ReadNpyFile(path));
      COHORT_ASSIGN_OR_RETURN(x, store::ToStoreFeatures(std::move(raw), path));
      const std::string labels_path = path.substr(0, path.size() - 4) + ".labels.npy";
      const bool has_labels_file = fs::exists(labels_path, ec);
      if (schema.has_labels() && !has_labels_file) {
        return Status::InvalidArgument(
            fmt::format("import_new: {}: table '{}' has labels: put them in {}", path, step.table,
                        fs::path(labels_path).filename().string()));
      }
      if (!schema.has_labels() && has_labels_file) {
        return Status::InvalidArgument(
            fmt::format("import_new: {}: table '{}' holds no labels, but {} is there", path,
                        step.table, fs::path(labels_path).filename().string()));
      }
      if (schema.has_labels()) {
        COHORT_ASSIGN_OR_RETURN(auto raw_labels, store::ReadNpyFile(labels_path));
        if (schema.label_kind == store::LabelKind::kClass) {
          COHORT_ASSIGN_OR_RETURN(y, store::ToClassLabels(std::move(raw_labels), labels_path));
        } else {
          COHORT_ASSIGN_OR_RETURN(y, store::ToVectorLabels(std::move(raw_labels), labels_path));
        }
      }
    }
    if (x.dtype != schema.feature_dtype && schema.feature_dtype == store::Dtype::kUint8) {
      return Status::InvalidArgument(
          fmt::format("import_new: {}: features are {} but table '{}' stores uint8", path,
                      store::DtypeName(x.dtype), step.table));
    }
    const size_t index = adds.size();
    const std::string x_file = fmt::format("add-{}-x.npy", index);
    COHORT_RETURN_IF_ERROR(store::WriteNpyFile(changes_dir + "/" + x_file, x));
    json add = {{"table", step.table}, {"features", x_file}};
    if (schema.has_labels()) {
      const std::string y_file = fmt::format("add-{}-y.npy", index);
      COHORT_RETURN_IF_ERROR(store::WriteNpyFile(changes_dir + "/" + y_file, y));
      add["labels"] = y_file;
    }
    adds.push_back(std::move(add));
    taken.emplace_back(name, x.shape.empty() ? 0 : x.shape[0]);
  }
  json changes = json::object();
  if (!adds.empty()) changes["add"] = std::move(adds);
  COHORT_RETURN_IF_ERROR(WriteText(changes_dir + "/changes.json", changes.dump(1) + "\n"));
  return taken;
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

namespace {

// Reads the change set in `changes_dir` against `input_generation`, applies it and commits
// one generation noted `note_prefix` and its counts (an empty change set commits nothing).
Result<UpdateStepResult> CommitChangeSet(const AcquireContext& c, const std::string& what,
                                         const std::string& note_prefix,
                                         const std::string& changes_dir, uint64_t input_generation,
                                         UpdateStepResult out, const std::string& note_extra = "") {
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
  out.counts = *counts;
  COHORT_ASSIGN_OR_RETURN(out.output_generation,
                          txn->Commit(note_prefix + " " + out.summary + note_extra));
  out.summary += note_extra;
  out.committed = true;
  MaybeCrash("update-committed");
  return out;
}

}  // namespace

Result<UpdateStepResult> RunCommandStep(const AcquireContext& c, int64_t round, size_t step_index,
                                        uint64_t round_generation, uint64_t input_generation,
                                        const std::vector<MemberResult>& results) {
  const LoopConfig& config = *c.config;
  const UpdateStepConfig& step = config.updates[step_index];
  const std::string what = fmt::format("update step {} ({})", step_index + 1, DescribeStep(step));
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
      out.counts = ParseChangeCounts(out.summary);
      return out;
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
        return out;
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

  if (step.kind == UpdateStepConfig::Kind::kImportNew) {
    COHORT_ASSIGN_OR_RETURN(auto input_snap,
                            store::Snapshot::Open(c.paths->store(), input_generation, c.env));
    auto files = WriteImports(c, step, history, *input_snap, changes_dir);
    if (!files.ok()) return files.status().WithContext(what);
    if (files->empty()) {
      out.summary = "no new files in " + step.directory;
      return out;
    }
    std::string list;
    for (const auto& [name, rows] : *files) {
      list += fmt::format("{}{} ({})", list.empty() ? "" : ", ", name, rows);
    }
    return CommitChangeSet(c, what, note_prefix, changes_dir, input_generation, out,
                           std::string(kImportedFilesMarker) + list);
  }
  if (step.kind == UpdateStepConfig::Kind::kPseudoLabel) {
    COHORT_ASSIGN_OR_RETURN(auto round_snap,
                            store::Snapshot::Open(c.paths->store(), round_generation, c.env));
    COHORT_ASSIGN_OR_RETURN(auto input_snap,
                            store::Snapshot::Open(c.paths->store(), input_generation, c.env));
    auto written = WritePseudoLabels(c, step, *round_snap, *input_snap, results, changes_dir);
    if (!written.ok()) return written.status().WithContext(what);
    return CommitChangeSet(c, what, note_prefix, changes_dir, input_generation, out);
  }
  if (step.kind == UpdateStepConfig::Kind::kRelabelOrDrop) {
    COHORT_ASSIGN_OR_RETURN(auto round_snap,
                            store::Snapshot::Open(c.paths->store(), round_generation, c.env));
    COHORT_ASSIGN_OR_RETURN(auto input_snap,
                            store::Snapshot::Open(c.paths->store(), input_generation, c.env));
    auto extra =
        WriteSuspects(c, step, round, step_index, *round_snap, *input_snap, results, changes_dir);
    if (!extra.ok()) return extra.status().WithContext(what);
    auto committed =
        CommitChangeSet(c, what, note_prefix, changes_dir, input_generation, out, *extra);
    // Nothing to commit still says why (no suspect, or the oracle kept every label).
    if (committed.ok() && !committed->committed) committed->summary += *extra;
    return committed;
  }

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
  return CommitChangeSet(c, what, note_prefix, changes_dir, input_generation, out);
}

}  // namespace cohort::loop
