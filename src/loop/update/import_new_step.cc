// The import_new update step: every .npy and .csv file in the step's directory that it has not
// imported before joins its table, once (docs/updates.md). Its change set is written as a
// program would write it (change_set_step.h); the commit note lists the files taken, and the
// store's history is the record of what was imported, across crashes too.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <system_error>

#include "loop/update/change_set_step.h"
#include "loop/update/update_step.h"
#include "store/import.h"
#include "store/store.h"

namespace cohort::loop {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

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
  const std::string which = fmt::format("({}): ", DescribeStep(step));
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

}  // namespace

Result<UpdateStepResult> RunImportNewStep(const UpdateStepInput& input) {
  const AcquireContext& c = *input.context;
  const UpdateStepConfig& step = input.step();
  COHORT_ASSIGN_OR_RETURN(BegunStep begun, BeginChangeSetStep(input));
  if (begun.ended) return *begun.ended;
  const ChangeSetStep& s = begun.step;
  auto files = WriteImports(c, step, s.history, *s.input_snap, s.changes_dir);
  if (!files.ok()) return files.status().WithContext(s.what);
  if (files->empty()) {
    UpdateStepResult out;
    out.output_generation = input.input_generation;
    out.summary = "no new files in " + step.directory;
    return out;
  }
  std::string list;
  for (const auto& [name, rows] : *files) {
    list += fmt::format("{}{} ({})", list.empty() ? "" : ", ", name, rows);
  }
  return CommitChangeSet(input, s, std::string(kImportedFilesMarker) + list);
}

}  // namespace cohort::loop
