#include "loop/update/change_set.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <span>
#include <unordered_map>

#include "common/closest_name.h"
#include "common/file_util.h"
#include "common/json_text.h"
#include "loop/config/class_labels.h"
#include "store/env.h"
#include "store/npy.h"

namespace cohort::loop {
namespace {

using store::HostArray;
using store::TableSchema;

namespace fs = std::filesystem;

// How many sample ids or rows one message names before "...".
constexpr size_t kNamed = 5;

const std::vector<std::string>& OperationNames() {
  static const std::vector<std::string> names{"add", "remove", "move", "relabel"};
  return names;
}

// The keys an entry of each operation may have, and of those the ones it must have.
struct EntryKeys {
  std::vector<std::string> allowed;
  std::vector<std::string> required;
};
const EntryKeys& KeysOf(const std::string& op) {
  static const std::map<std::string, EntryKeys> keys{
      {"add", {{"table", "features", "labels"}, {"table", "features"}}},
      {"remove", {{"table", "ids"}, {"table", "ids"}}},
      {"move", {{"from", "to", "ids", "labels"}, {"from", "to", "ids"}}},
      {"relabel", {{"table", "ids", "labels"}, {"table", "ids", "labels"}}},
  };
  return keys.at(op);
}

std::string Join(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// Text from the change set, quoted and kept to one line whatever it holds.
std::string Quoted(const std::string& text) { return JsonForMessage(nlohmann::json(text), 80); }

// "sample id 7", or "3 sample ids 7, 8, 9", naming at most the first few.
std::string IdsText(const std::vector<uint64_t>& ids) {
  if (ids.size() == 1) return "sample id " + std::to_string(ids[0]);
  std::string s = std::to_string(ids.size()) + " sample ids ";
  for (size_t i = 0; i < ids.size() && i < kNamed; i++) {
    s += (i > 0 ? ", " : "") + std::to_string(ids[i]);
  }
  return ids.size() > kNamed ? s + ", ..." : s;
}

// The index of the first NaN or infinite element of a float32 array, if any.
std::optional<uint64_t> FirstNonFinite(const HostArray& a) {
  if (a.dtype != store::Dtype::kFloat32) return std::nullopt;
  const float* v = a.as<float>();
  for (uint64_t i = 0; i < a.num_elements(); i++) {
    if (!std::isfinite(v[i])) return i;
  }
  return std::nullopt;
}

// Reads one change set; every check reports through Fail(where, ...), one line each.
class Reader {
 public:
  Reader(std::string dir, const store::Snapshot& base, int64_t classes)
      : dir_(std::move(dir)),
        file_(store::JoinPath(dir_, kChangesFileName)),
        base_(base),
        classes_(classes) {}

  Result<ChangeSet> Read();

 private:
  // The entry's object, its keys checked against the operation's.
  Status CheckKeys(const std::string& where, const std::string& op, const nlohmann::json& entry);
  Result<std::string> StringField(const std::string& where, const nlohmann::json& entry,
                                  const std::string& key);
  // The path of a file the entry names, inside the change-set directory.
  Result<std::string> PathOf(const std::string& where, const std::string& key,
                             const std::string& name);
  Result<HostArray> ReadArray(const std::string& where, const std::string& key,
                              const std::string& name);
  Result<std::vector<uint64_t>> ReadIds(const std::string& where, const std::string& name);
  Result<const store::Table*> TableOf(const std::string& where, const std::string& name);
  // Ids live in `table` at the base, and used by no earlier operation of the change set.
  Status CheckIds(const std::string& where, const std::string& op_name, const store::Table& table,
                  const std::vector<uint64_t>& ids);
  Status CheckFeatures(const std::string& where, const std::string& file, const store::Table& table,
                       const HostArray& x);
  // Labels for `rows` rows of `table` (ids of those rows, or empty for rows still to add).
  Status CheckLabels(const std::string& where, const std::string& file, const store::Table& table,
                     const HostArray& y, uint64_t rows, std::span<const uint64_t> ids);
  Status CheckClassRange(const std::string& what, std::span<const int64_t> labels,
                         std::span<const uint64_t> ids);

  Status ReadRelabel(const std::string& where, const std::string& op_name,
                     const nlohmann::json& entry, ChangeSet* out);
  Status ReadRemove(const std::string& where, const std::string& op_name,
                    const nlohmann::json& entry, ChangeSet* out);
  Status ReadMove(const std::string& where, const std::string& op_name, const nlohmann::json& entry,
                  ChangeSet* out);
  Status ReadAdd(const std::string& where, const nlohmann::json& entry, ChangeSet* out);

  Status Fail(const std::string& where, const std::string& what) const {
    return Status::InvalidArgument(where + ": " + what);
  }
  const std::vector<uint64_t>& SortedIds(const store::Table& table);

  std::string dir_;
  std::string file_;
  const store::Snapshot& base_;
  int64_t classes_;
  std::map<std::string, std::vector<uint64_t>> sorted_ids_;  // per table, read when needed
  std::unordered_map<uint64_t, std::string> used_by_;        // sample id -> "remove[0]"
};

Result<ChangeSet> Reader::Read() {
  std::error_code ec;
  if (!fs::is_regular_file(file_, ec)) {
    return Status::NotFound(file_ + ": no such file (a change set is a directory holding " +
                            kChangesFileName + " and the .npy files it names)");
  }
  COHORT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(file_));
  auto parsed = ParseJsonBounded(text);
  if (!parsed.ok()) return Fail(file_, parsed.status().message());
  const nlohmann::json& root = *parsed;
  if (!root.is_object()) {
    return Fail(file_, "must hold a JSON object with keys " + Join(OperationNames()) + ", not " +
                           JsonForMessage(root));
  }
  for (const auto& [key, value] : root.items()) {
    if (std::find(OperationNames().begin(), OperationNames().end(), key) ==
        OperationNames().end()) {
      std::string closest = ClosestName(key, OperationNames());
      return Fail(file_, "unknown key " + Quoted(key) +
                             (closest.empty() ? "" : "; did you mean '" + closest + "'?") +
                             " (keys: " + Join(OperationNames()) + ")");
    }
    if (!value.is_array()) {
      return Fail(file_, "'" + key + "' must be a list of entries, not " + JsonForMessage(value));
    }
  }

  ChangeSet out;
  out.file = file_;
  out.base_generation = base_.generation();
  // The order they are applied in, so "already used by" names the one applied first.
  for (const std::string op : {"relabel", "remove", "move", "add"}) {
    if (!root.contains(op)) continue;
    const nlohmann::json& list = root.at(op);
    for (size_t i = 0; i < list.size(); i++) {
      const std::string op_name = op + "[" + std::to_string(i) + "]";
      const std::string where = file_ + ": " + op_name;
      COHORT_RETURN_IF_ERROR(CheckKeys(where, op, list[i]));
      if (op == "relabel") COHORT_RETURN_IF_ERROR(ReadRelabel(where, op_name, list[i], &out));
      if (op == "remove") COHORT_RETURN_IF_ERROR(ReadRemove(where, op_name, list[i], &out));
      if (op == "move") COHORT_RETURN_IF_ERROR(ReadMove(where, op_name, list[i], &out));
      if (op == "add") COHORT_RETURN_IF_ERROR(ReadAdd(where, list[i], &out));
    }
  }
  return out;
}

Status Reader::CheckKeys(const std::string& where, const std::string& op,
                         const nlohmann::json& entry) {
  const EntryKeys& keys = KeysOf(op);
  if (!entry.is_object()) {
    return Fail(where, "must be an object with keys " + Join(keys.allowed) + ", not " +
                           JsonForMessage(entry));
  }
  for (const auto& [key, value] : entry.items()) {
    if (std::find(keys.allowed.begin(), keys.allowed.end(), key) == keys.allowed.end()) {
      std::string closest = ClosestName(key, keys.allowed);
      return Fail(where, "unknown key " + Quoted(key) +
                             (closest.empty() ? "" : "; did you mean '" + closest + "'?") + " (a " +
                             op + " has " + Join(keys.allowed) + ")");
    }
  }
  for (const auto& key : keys.required) {
    if (!entry.contains(key)) {
      return Fail(where,
                  "'" + key + "' is missing (a " + op + " needs " + Join(keys.required) + ")");
    }
  }
  return Status::OK();
}

Result<std::string> Reader::StringField(const std::string& where, const nlohmann::json& entry,
                                        const std::string& key) {
  const nlohmann::json& v = entry.at(key);
  if (!v.is_string())
    return Fail(where, "'" + key + "' must be a string, not " + JsonForMessage(v));
  return v.get<std::string>();
}

Result<std::string> Reader::PathOf(const std::string& where, const std::string& key,
                                   const std::string& name) {
  const std::string bad = "'" + key + "' " + Quoted(name);
  for (char c : name) {
    if (static_cast<unsigned char>(c) < 0x20)
      return Fail(where, bad + " holds a control character");
  }
  fs::path rel(name);
  if (name.empty() || rel.is_absolute()) {
    return Fail(where, bad + " must be a path relative to the change-set directory");
  }
  fs::path normal = rel.lexically_normal();
  if (normal.empty() || *normal.begin() == "..") {
    return Fail(where, bad + " leaves the change-set directory");
  }
  fs::path full = fs::path(dir_) / normal;
  // A symbolic link may lead out of the directory too: compare where both really are.
  std::error_code ec_dir, ec_full;
  fs::path real_dir = fs::weakly_canonical(dir_, ec_dir);
  fs::path real_full = fs::weakly_canonical(full, ec_full);
  if (!ec_dir && !ec_full) {
    fs::path inside = real_full.lexically_relative(real_dir);
    if (inside.empty() || *inside.begin() == "..") {
      return Fail(where, bad + " leaves the change-set directory (through a symbolic link)");
    }
  }
  return full.string();
}

Result<HostArray> Reader::ReadArray(const std::string& where, const std::string& key,
                                    const std::string& name) {
  COHORT_ASSIGN_OR_RETURN(std::string path, PathOf(where, key, name));
  auto array = store::ReadNpyFile(path);
  if (!array.ok()) return array.status().WithContext(where + ": '" + key + "'");
  return std::move(array).value();
}

Result<std::vector<uint64_t>> Reader::ReadIds(const std::string& where, const std::string& name) {
  COHORT_ASSIGN_OR_RETURN(HostArray a, ReadArray(where, "ids", name));
  const std::string what = "ids " + name;
  if (a.shape.size() != 1) {
    return Fail(where, what + " is " + store::DtypeName(a.dtype) + store::ShapeToString(a.shape) +
                           ", ids must be a 1-D array");
  }
  std::vector<uint64_t> ids(a.rows());
  if (a.dtype == store::Dtype::kUint64) {
    std::copy_n(a.as<uint64_t>(), ids.size(), ids.begin());
  } else if (a.dtype == store::Dtype::kInt64) {
    for (size_t i = 0; i < ids.size(); i++) {
      int64_t id = a.as<int64_t>()[i];
      if (id < 0) {
        return Fail(where, what + ": negative sample id " + std::to_string(id) + " at position " +
                               std::to_string(i));
      }
      ids[i] = static_cast<uint64_t>(id);
    }
  } else {
    return Fail(where, what + " is " + store::DtypeName(a.dtype) +
                           ", ids must be uint64 (or int64 without negative values)");
  }
  return ids;
}

Result<const store::Table*> Reader::TableOf(const std::string& where, const std::string& name) {
  if (!base_.has_table(name)) {
    std::vector<std::string> names = base_.table_names();
    std::string closest = ClosestName(name, names);
    return Status::NotFound(where + ": table " + Quoted(name) + " does not exist at generation " +
                            std::to_string(base_.generation()) + " (tables: " + Join(names) + ")" +
                            (closest.empty() ? "" : "; did you mean '" + closest + "'?"));
  }
  return *base_.table(name);
}

const std::vector<uint64_t>& Reader::SortedIds(const store::Table& table) {
  auto it = sorted_ids_.find(table.name());
  if (it != sorted_ids_.end()) return it->second;
  std::vector<uint64_t> ids = table.Ids();
  std::sort(ids.begin(), ids.end());
  return sorted_ids_.emplace(table.name(), std::move(ids)).first->second;
}

Status Reader::CheckIds(const std::string& where, const std::string& op_name,
                        const store::Table& table, const std::vector<uint64_t>& ids) {
  const std::vector<uint64_t>& live = SortedIds(table);
  std::vector<uint64_t> unknown;
  for (uint64_t id : ids) {
    if (!std::binary_search(live.begin(), live.end(), id)) unknown.push_back(id);
  }
  if (!unknown.empty()) {
    // A sample in another table is the likeliest mistake: say where it is.
    std::string elsewhere;
    for (const auto& name : base_.table_names()) {
      if (name == table.name()) continue;
      const std::vector<uint64_t>& other = SortedIds(**base_.table(name));
      if (std::binary_search(other.begin(), other.end(), unknown[0])) {
        elsewhere = " (sample id " + std::to_string(unknown[0]) + " is in table " + name + ")";
        break;
      }
    }
    return Status::NotFound(where + ": " + IdsText(unknown) +
                            (unknown.size() == 1 ? " is" : " are") + " not live in table " +
                            table.name() + " at generation " + std::to_string(base_.generation()) +
                            elsewhere);
  }
  std::vector<uint64_t> twice;
  std::string first_other;
  for (uint64_t id : ids) {
    auto [it, fresh] = used_by_.emplace(id, op_name);
    if (fresh) continue;
    if (twice.empty()) first_other = it->second;
    twice.push_back(id);
  }
  if (!twice.empty()) {
    return Fail(where,
                IdsText(twice) + (twice.size() == 1 ? " is" : " are") +
                    (first_other == op_name ? " given twice" : " already used by " + first_other) +
                    " (a change set changes each sample once)");
  }
  return Status::OK();
}

Status Reader::CheckFeatures(const std::string& where, const std::string& file,
                             const store::Table& table, const HostArray& x) {
  const TableSchema& s = table.schema();
  if (x.shape.empty() || x.dtype != s.feature_dtype || x.row_shape() != s.feature_shape) {
    return Fail(where, "features " + file + " are " + store::DtypeName(x.dtype) +
                           store::ShapeToString(x.shape) + ", table " + table.name() + " needs " +
                           store::DtypeName(s.feature_dtype) +
                           store::ShapeToString(store::WithRows(x.rows(), s.feature_shape)));
  }
  if (auto bad = FirstNonFinite(x)) {
    return Fail(where,
                "features " + file + ": NaN or infinity at row " +
                    std::to_string(*bad / std::max<uint64_t>(1, x.num_elements() / x.rows())));
  }
  return Status::OK();
}

Status Reader::CheckLabels(const std::string& where, const std::string& file,
                           const store::Table& table, const HostArray& y, uint64_t rows,
                           std::span<const uint64_t> ids) {
  const TableSchema& s = table.schema();
  const std::string what = "labels " + file;
  if (!s.has_labels()) {
    return Fail(where, what + " given, but table " + table.name() + " has no labels");
  }
  if (y.rows() != rows || y.shape.empty()) {
    return Fail(where, what + " have " + std::to_string(y.rows()) + " rows for " +
                           std::to_string(rows) + (ids.empty() ? " rows of features" : " ids"));
  }
  if (y.dtype != s.label_dtype() || y.row_shape() != s.label_shape) {
    return Fail(where, what + " are " + store::DtypeName(y.dtype) + store::ShapeToString(y.shape) +
                           ", table " + table.name() + " needs " +
                           store::DtypeName(s.label_dtype()) +
                           store::ShapeToString(store::WithRows(rows, s.label_shape)));
  }
  if (auto bad = FirstNonFinite(y)) {
    uint64_t row = *bad / std::max<uint64_t>(1, y.num_elements() / y.rows());
    return Fail(where, what + ": NaN or infinity at " +
                           (ids.empty() ? "row " + std::to_string(row)
                                        : "sample id " + std::to_string(ids[row])));
  }
  if (s.label_kind == store::LabelKind::kClass) {
    std::span<const int64_t> labels(y.as<int64_t>(), rows);
    return CheckClassRange(where + ": " + what, labels, ids);
  }
  return Status::OK();
}

Status Reader::CheckClassRange(const std::string& what, std::span<const int64_t> labels,
                               std::span<const uint64_t> ids) {
  if (classes_ <= 0) return Status::OK();
  if (!ids.empty()) return CheckClassLabels(what, labels, ids, classes_);
  // Rows still to add have no sample ids yet: name their rows instead.
  size_t bad = 0;
  std::string named;
  for (size_t i = 0; i < labels.size(); i++) {
    if (labels[i] >= 0 && labels[i] < classes_) continue;
    if (++bad <= kNamed) {
      named += (named.empty() ? "" : ", ") +
               ("row " + std::to_string(i) + " (label " + std::to_string(labels[i]) + ")");
    }
  }
  if (bad == 0) return Status::OK();
  return Status::InvalidArgument(what + ": " + std::to_string(bad) + " label(s) outside [0, " +
                                 std::to_string(classes_) + ") at " + named +
                                 (bad > kNamed ? ", ..." : ""));
}

Status Reader::ReadRelabel(const std::string& entry_where, const std::string& op_name,
                           const nlohmann::json& entry, ChangeSet* out) {
  ChangeSetRelabel r;
  COHORT_ASSIGN_OR_RETURN(r.table, StringField(entry_where, entry, "table"));
  COHORT_ASSIGN_OR_RETURN(const store::Table* table, TableOf(entry_where, r.table));
  r.where = entry_where + " (table " + r.table + ")";
  if (!table->schema().has_labels()) {
    return Fail(r.where, "table " + r.table + " has no labels to relabel");
  }
  COHORT_ASSIGN_OR_RETURN(std::string ids_file, StringField(r.where, entry, "ids"));
  COHORT_ASSIGN_OR_RETURN(std::string labels_file, StringField(r.where, entry, "labels"));
  COHORT_ASSIGN_OR_RETURN(r.ids, ReadIds(r.where, ids_file));
  COHORT_ASSIGN_OR_RETURN(r.labels, ReadArray(r.where, "labels", labels_file));
  COHORT_RETURN_IF_ERROR(CheckLabels(r.where, labels_file, *table, r.labels, r.ids.size(), r.ids));
  COHORT_RETURN_IF_ERROR(CheckIds(r.where, op_name, *table, r.ids));
  out->relabel.push_back(std::move(r));
  return Status::OK();
}

Status Reader::ReadRemove(const std::string& entry_where, const std::string& op_name,
                          const nlohmann::json& entry, ChangeSet* out) {
  ChangeSetRemove r;
  COHORT_ASSIGN_OR_RETURN(r.table, StringField(entry_where, entry, "table"));
  COHORT_ASSIGN_OR_RETURN(const store::Table* table, TableOf(entry_where, r.table));
  r.where = entry_where + " (table " + r.table + ")";
  COHORT_ASSIGN_OR_RETURN(std::string ids_file, StringField(r.where, entry, "ids"));
  COHORT_ASSIGN_OR_RETURN(r.ids, ReadIds(r.where, ids_file));
  COHORT_RETURN_IF_ERROR(CheckIds(r.where, op_name, *table, r.ids));
  out->remove.push_back(std::move(r));
  return Status::OK();
}

Status Reader::ReadMove(const std::string& entry_where, const std::string& op_name,
                        const nlohmann::json& entry, ChangeSet* out) {
  ChangeSetMove m;
  COHORT_ASSIGN_OR_RETURN(m.from, StringField(entry_where, entry, "from"));
  COHORT_ASSIGN_OR_RETURN(m.to, StringField(entry_where, entry, "to"));
  COHORT_ASSIGN_OR_RETURN(const store::Table* from, TableOf(entry_where, m.from));
  // A move into a table that does not exist is refused, not a way to create one: a misspelt
  // destination would otherwise quietly become a new table.
  COHORT_ASSIGN_OR_RETURN(const store::Table* to, TableOf(entry_where, m.to));
  m.where = entry_where + " (" + m.from + " -> " + m.to + ")";
  if (m.from == m.to)
    return Fail(m.where, "cannot move samples from table " + m.from + " to itself");
  const TableSchema& src = from->schema();
  const TableSchema& dst = to->schema();
  if (src.feature_dtype != dst.feature_dtype || src.feature_shape != dst.feature_shape) {
    return Fail(m.where, "schema mismatch: " + m.from + " has " + src.ToString() + ", " + m.to +
                             " has " + dst.ToString());
  }
  COHORT_ASSIGN_OR_RETURN(std::string ids_file, StringField(m.where, entry, "ids"));
  COHORT_ASSIGN_OR_RETURN(m.ids, ReadIds(m.where, ids_file));
  COHORT_RETURN_IF_ERROR(CheckIds(m.where, op_name, *from, m.ids));
  if (entry.contains("labels")) {
    COHORT_ASSIGN_OR_RETURN(std::string labels_file, StringField(m.where, entry, "labels"));
    COHORT_ASSIGN_OR_RETURN(HostArray labels, ReadArray(m.where, "labels", labels_file));
    COHORT_RETURN_IF_ERROR(CheckLabels(m.where, labels_file, *to, labels, m.ids.size(), m.ids));
    m.labels = std::move(labels);
  } else if (dst.has_labels()) {
    if (src.label_kind != dst.label_kind || src.label_shape != dst.label_shape) {
      return Fail(m.where, "'labels' is missing: " + m.from + " has labels " +
                               store::LabelKindName(src.label_kind) + ", " + m.to + " needs " +
                               store::LabelKindName(dst.label_kind) +
                               (dst.label_kind == store::LabelKind::kVector
                                    ? " float32" + store::DimsToString(dst.label_shape)
                                    : ""));
    }
    // The labels the rows carry become training labels: they must fit the run's classes too.
    if (dst.label_kind == store::LabelKind::kClass && classes_ > 0 && !m.ids.empty()) {
      COHORT_ASSIGN_OR_RETURN(std::vector<uint64_t> rows, from->RowsOfIds(m.ids));
      std::vector<int64_t> carried(rows.size());
      COHORT_RETURN_IF_ERROR(
          from->GatherLabels(rows, reinterpret_cast<std::byte*>(carried.data())));
      COHORT_RETURN_IF_ERROR(CheckClassRange(m.where + ": labels of " + m.from, carried, m.ids));
    }
  }
  out->move.push_back(std::move(m));
  return Status::OK();
}

Status Reader::ReadAdd(const std::string& entry_where, const nlohmann::json& entry,
                       ChangeSet* out) {
  ChangeSetAdd a;
  COHORT_ASSIGN_OR_RETURN(a.table, StringField(entry_where, entry, "table"));
  COHORT_ASSIGN_OR_RETURN(const store::Table* table, TableOf(entry_where, a.table));
  a.where = entry_where + " (table " + a.table + ")";
  COHORT_ASSIGN_OR_RETURN(std::string features_file, StringField(a.where, entry, "features"));
  COHORT_ASSIGN_OR_RETURN(a.features, ReadArray(a.where, "features", features_file));
  COHORT_RETURN_IF_ERROR(CheckFeatures(a.where, features_file, *table, a.features));
  if (entry.contains("labels")) {
    COHORT_ASSIGN_OR_RETURN(std::string labels_file, StringField(a.where, entry, "labels"));
    COHORT_ASSIGN_OR_RETURN(HostArray labels, ReadArray(a.where, "labels", labels_file));
    COHORT_RETURN_IF_ERROR(
        CheckLabels(a.where, labels_file, *table, labels, a.features.rows(), {}));
    a.labels = std::move(labels);
  } else if (table->schema().has_labels()) {
    return Fail(a.where, std::string("'labels' is missing: table ") + a.table + " has labels " +
                             store::LabelKindName(table->schema().label_kind));
  }
  out->add.push_back(std::move(a));
  return Status::OK();
}

}  // namespace

bool ChangeSet::empty() const {
  for (const auto& r : relabel) {
    if (!r.ids.empty()) return false;
  }
  for (const auto& r : remove) {
    if (!r.ids.empty()) return false;
  }
  for (const auto& m : move) {
    if (!m.ids.empty()) return false;
  }
  for (const auto& a : add) {
    if (a.features.rows() > 0) return false;
  }
  return true;
}

Result<ChangeSet> ReadChangeSet(const std::string& dir, const store::Snapshot& base,
                                int64_t classes) {
  return Reader(dir, base, classes).Read();
}

Result<ChangeCounts> ApplyChangeSet(const ChangeSet& changes, store::Transaction* txn) {
  if (txn->base_generation() != changes.base_generation) {
    return Status::InvalidArgument(
        changes.file + ": checked against generation " + std::to_string(changes.base_generation) +
        ", but the transaction starts from generation " + std::to_string(txn->base_generation()));
  }
  ChangeCounts counts;
  for (const auto& r : changes.relabel) {
    if (r.ids.empty()) continue;
    COHORT_RETURN_IF_ERROR(txn->Relabel(r.table, r.ids, r.labels).WithContext(r.where));
    counts.tables[r.table].relabelled += r.ids.size();
  }
  for (const auto& r : changes.remove) {
    if (r.ids.empty()) continue;
    COHORT_RETURN_IF_ERROR(txn->Remove(r.table, r.ids).WithContext(r.where));
    counts.tables[r.table].removed += r.ids.size();
  }
  for (const auto& m : changes.move) {
    if (m.ids.empty()) continue;
    COHORT_RETURN_IF_ERROR(
        txn->Move(m.from, m.to, m.ids, m.labels ? &*m.labels : nullptr).WithContext(m.where));
    counts.tables[m.from].moved_out += m.ids.size();
    counts.tables[m.to].moved_in += m.ids.size();
  }
  for (const auto& a : changes.add) {
    if (a.features.rows() == 0) {
      counts.added_ids.emplace_back();
      continue;
    }
    auto ids = txn->Append(a.table, a.features, a.labels ? &*a.labels : nullptr);
    if (!ids.ok()) return ids.status().WithContext(a.where);
    counts.tables[a.table].added += ids->size();
    counts.added_ids.push_back(std::move(ids).value());
  }
  return counts;
}

}  // namespace cohort::loop
