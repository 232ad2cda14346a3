#include "loop/update_step.h"

#include <fmt/format.h>

#include <cctype>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <system_error>

#include "loop/crash_point.h"
#include "loop/predictions.h"
#include "loop/pseudo_label.h"
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

Status WriteText(const std::string& path, const std::string& text);

// "command fix.py", or "pseudo_label" for a built-in step under its default name.
std::string DescribeStep(const UpdateStepConfig& step) {
  const std::string kind = UpdateKindName(step.kind);
  return step.name == kind ? kind : kind + " " + step.name;
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
  std::vector<std::pair<size_t, std::string>> files;
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].done) continue;
    if (results[i].predictions_pool.empty()) {
      return Status::InvalidArgument(c.config->members[i].name +
                                     " did not predict the pool this round");
    }
    files.emplace_back(i, c.paths->Absolute(results[i].predictions_pool));
  }
  COHORT_ASSIGN_OR_RETURN(StackedPredictions stacked, StackPredictions(files, pool->size()));
  COHORT_ASSIGN_OR_RETURN(auto view, MakeEnsemblePredictions(stacked.data, stacked.members,
                                                             stacked.samples, stacked.classes));
  COHORT_ASSIGN_OR_RETURN(const store::Table* pool_now, input_snap.table(tables.pool));
  const std::vector<uint64_t> now = pool_now->Ids();
  const std::set<uint64_t> still_in_pool(now.begin(), now.end());
  std::vector<bool> eligible(pool->size());
  for (uint64_t row = 0; row < pool->size(); ++row) {
    eligible[row] = still_in_pool.count(pool->id(row)) > 0;
  }
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
    store::HostArray id_array(store::Dtype::kUint64, {ids.size()});
    std::memcpy(id_array.data.data(), ids.data(), ids.size() * sizeof(uint64_t));
    store::HostArray label_array(store::Dtype::kInt64, {labels.size()});
    std::memcpy(label_array.data.data(), labels.data(), labels.size() * sizeof(int64_t));
    COHORT_RETURN_IF_ERROR(store::WriteNpyFile(changes_dir + "/ids.npy", id_array));
    COHORT_RETURN_IF_ERROR(store::WriteNpyFile(changes_dir + "/labels.npy", label_array));
    changes["move"] = json::array({{{"from", tables.pool},
                                    {"to", tables.train},
                                    {"ids", "ids.npy"},
                                    {"labels", "labels.npy"}}});
  }
  COHORT_RETURN_IF_ERROR(WriteText(changes_dir + "/changes.json", changes.dump(1) + "\n"));
  return ids.size();
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
